"""The post-processor each file format asks for: what ``add_special_tokens=True`` adds.

``cpu_ref/post.py`` states the rules (HF's post_processor, sentencepiece's ``add_bos``, llama.cpp's
``add_bos``/``add_eos``/``add_sep``); this module reads them from a file into a
``components.postprocessors.Template``.
"""

from __future__ import annotations

from ..components.postprocessors import NO_POST, Template

GGUF_BOS_PRE = ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                "midm-2.0", "lfm2", "tekken", "chameleon")
GGUF_SEP_PRE = ("jina-v1-en", "jina-v2-code", "roberta-bpe")
#: per ``tokenizer.ggml.model``: (add_bos, add_eos, add_sep), (bos id, eos id, sep id)
GGUF_DEFAULTS = {"llama": ((True, False, False), (1, 2, None)),
                 "bert": ((True, False, True), (101, None, 102)),
                 "t5": ((False, True, False), (None, 1, None)),
                 "gpt2": ((False, False, False), (11, 11, None)),
                 "gemma4": ((False, False, False), (None, None, None))}
# Gemma 4's pre-type: llama.cpp adds BOS whatever tokenizer.ggml.add_bos_token says
GGUF_FORCED_BOS_PRE = ("gemma4", "granite-embed-multi-311m")
_HF = ("TemplateProcessing", "BertProcessing", "RobertaProcessing", "ByteLevel", "Sequence")


def hf_post(spec, need):
    """The tokenizer.json ``post_processor`` (single sequence) as a Template."""
    if spec is None:
        return NO_POST
    need(isinstance(spec, dict), "post_processor must be an object or null")
    kind = spec.get("type")
    need(kind in _HF, f"post_processor {kind!r} is not supported (supported: {', '.join(_HF)})")
    if kind == "ByteLevel":
        return NO_POST  # (offsets only)
    if kind == "Sequence":
        # HF runs each on the previous one's encodings, and a template leaves several of them
        # (a following BertProcessing sees a pair): one processor that adds ids at most
        adding = [hf_post(sub, need) for sub in spec.get("processors") or []]
        adding = [a for a in adding if a]
        need(len(adding) <= 1, "post_processor Sequence: more than one processor that adds "
                               "tokens is not supported")
        return adding[0] if adding else NO_POST
    if kind in ("BertProcessing", "RobertaProcessing"):
        ids = []
        for key in ("cls", "sep"):
            v = spec.get(key)
            need(isinstance(v, list) and len(v) == 2 and isinstance(v[1], int),
                 f"post_processor {kind}.{key} must be [token, id]")
            ids.append(v[1])
        return Template((ids[0],), (ids[1],))
    specials = spec.get("special_tokens") or {}
    need(isinstance(specials, dict), "post_processor special_tokens must be an object")
    before, after, seen = [], [], False
    for k, item in enumerate(spec.get("single") or []):
        need(isinstance(item, dict) and len(item) == 1, f"post_processor single[{k}]: expected "
                                                        "{SpecialToken: ...} or {Sequence: ...}")
        if "Sequence" in item:
            need(item["Sequence"].get("id") == "A" and not seen,
                 "post_processor single: exactly one Sequence item, A")
            seen = True
            continue
        name = (item.get("SpecialToken") or {}).get("id")
        entry = specials.get(name)
        need(isinstance(entry, dict) and isinstance(entry.get("ids"), list),
             f"post_processor single[{k}]: special token {name!r} is not in special_tokens")
        (after if seen else before).extend(entry["ids"])
    need(seen, "post_processor single has no Sequence item")
    return Template(before, after)


def spm_post(bos_id: int, types: list):
    """sentencepiece's ``encode(text, add_bos=True)``: the BOS control piece first."""
    if 0 <= bos_id < len(types) and types[bos_id] == 3:  # CONTROL
        return Template((bos_id,), ())
    return NO_POST


def gguf_post(meta: dict, n_tokens: int):
    """llama.cpp's ``add_special`` for a GGUF file's tokenizer metadata."""
    model = meta.get("tokenizer.ggml.model")
    (bos, eos, sep), (bos_id, eos_id, sep_id) = GGUF_DEFAULTS[model]
    if model == "gpt2":
        pre = meta.get("tokenizer.ggml.pre")
        bos, sep = pre in GGUF_BOS_PRE, pre in GGUF_SEP_PRE
    bos = bool(meta.get("tokenizer.ggml.add_bos_token", bos))
    if model == "gemma4" or (model == "gpt2" and meta.get("tokenizer.ggml.pre")
                             in GGUF_FORCED_BOS_PRE):
        bos = True
    eos = bool(meta.get("tokenizer.ggml.add_eos_token", eos))
    sep = bool(meta.get("tokenizer.ggml.add_sep_token", sep))

    def token(key: str, default):
        got = meta.get(key)
        return got if isinstance(got, int) and 0 <= got < n_tokens else default  # (llama.cpp
        # keeps the default for an id out of range)

    bos_id = token("tokenizer.ggml.bos_token_id", bos_id)
    eos_id = token("tokenizer.ggml.eos_token_id", eos_id)
    sep_id = token("tokenizer.ggml.seperator_token_id", sep_id)  # (llama.cpp's spelling)
    before = [bos_id] if bos and bos_id is not None else []
    after = ([eos_id] if eos and eos_id is not None else []) + (
        [sep_id] if sep and sep_id is not None else [])
    return Template(before, after) if before or after else NO_POST
