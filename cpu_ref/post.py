"""Which special tokens each library adds around one encoded text, when asked to.

gputok adds nothing by default (tiktoken's contract); ``add_special_tokens=True`` adds what the
model's own library adds by default. Checked against ``tokenizers`` (``Tokenizer.encode(text)``),
``transformers`` 5.x (``AutoTokenizer.from_pretrained(dir).encode(text)``), sentencepiece and
llama.cpp's ``llama-vocab.cpp``:

**HF tokenizer.json** (``post_processor``, one sequence):

* ``TemplateProcessing``: the ``single`` template, each ``SpecialToken`` item replaced by the
  ``ids`` of its entry in ``special_tokens`` and the ``Sequence`` item ``A`` by the text's ids;
* ``BertProcessing`` / ``RobertaProcessing``: ``cls`` id, the text's ids, ``sep`` id;
* ``ByteLevel``: no id added (it only trims offsets); ``Sequence``: each in turn, on the
  encodings the one before left: a template leaves one per item, so a BertProcessing after a
  template sees a pair (``[CLS] <s> [SEP] $A [SEP]``); gputok takes a Sequence with one
  processor that adds ids;
* none: nothing.

**A model directory** (``AutoTokenizer``, transformers 5): with a tokenizer.json, its
post-processor as above; ``add_bos_token`` / ``add_eos_token`` of tokenizer_config.json are
dropped when a tokenizer.json is present (they only shape the template transformers writes for
a tokenizer it converts from a slow one). Tokens named in tokenizer_config.json's
``added_tokens_decoder`` and the special tokens of tokenizer_config.json / special_tokens_map.json
(``bos_token``, ``eos_token``, ``unk_token``, ``sep_token``, ``pad_token``, ``cls_token``,
``mask_token``, ``additional_special_tokens``) that the tokenizer.json does not list as added
tokens become added special tokens. ``model_max_length`` truncates nothing unless asked.

**sentencepiece** ``.model``: ``encode(text, add_bos=True)`` puts the BOS piece's id
(``trainer_spec.bos_id``, when that piece is a control piece) first; nothing at the end.

**llama.cpp** GGUF (``tokenizer.ggml.model``): BOS first when ``add_bos``, EOS last when
``add_eos``, SEP last when ``add_sep``; defaults per model: ``llama`` add_bos; ``bert`` add_bos
(the [CLS] id) and add_sep; ``t5`` add_eos; ``gpt2`` nothing, except add_bos for the ``pre``
names llama3 / llama-v3 / llama-bpe / falcon3 / falcon-h1 / pixtral / midm-2.0 / lfm2 / tekken /
chameleon and add_sep for jina-v1-en / jina-v2-code / roberta-bpe; the keys
``tokenizer.ggml.add_bos_token`` / ``add_eos_token`` / ``add_sep_token`` override them; the ids
are ``tokenizer.ggml.bos_token_id`` / ``eos_token_id`` / ``seperator_token_id`` with defaults
llama 1 / 2 / none, bert 101 / none / 102, t5 none / 1 / none, gpt2 11 / 11 / none.
"""

from __future__ import annotations

GGUF_BOS_PRE = ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                "midm-2.0", "lfm2", "tekken", "chameleon")
GGUF_SEP_PRE = ("jina-v1-en", "jina-v2-code", "roberta-bpe")
#: per ``tokenizer.ggml.model``: (add_bos, add_eos, add_sep), (bos id, eos id, sep id)
GGUF_DEFAULTS = {"llama": ((True, False, False), (1, 2, None)),
                 "bert": ((True, False, True), (101, None, 102)),
                 "t5": ((False, True, False), (None, 1, None)),
                 "gpt2": ((False, False, False), (11, 11, None))}


def hf_post(spec: "dict | None", ids: list) -> list:
    """``ids`` with what the tokenizer.json ``post_processor`` adds to a single sequence.

    >>> hf_post({"type": "BertProcessing", "cls": ["[CLS]", 101], "sep": ["[SEP]", 102]}, [7])
    [101, 7, 102]
    """
    if spec is None:
        return list(ids)
    kind = spec["type"]
    if kind == "Sequence":
        adding = [s for s in spec.get("processors", []) if s["type"] != "ByteLevel"]
        if len(adding) > 1:
            raise ValueError("a Sequence of processors that add ids is not in this reference")
        return hf_post(adding[0], ids) if adding else list(ids)
    if kind == "ByteLevel":
        return list(ids)
    if kind in ("BertProcessing", "RobertaProcessing"):
        return [spec["cls"][1], *ids, spec["sep"][1]]
    if kind == "TemplateProcessing":
        out: list = []
        for item in spec["single"]:
            if "Sequence" in item:
                if item["Sequence"]["id"] != "A":
                    raise ValueError("a single-sequence template names sequence B")
                out.extend(ids)
            else:
                out.extend(spec["special_tokens"][item["SpecialToken"]["id"]]["ids"])
        return out
    raise ValueError(f"post_processor {kind!r} is not known to this reference")


def gguf_post(meta: dict, ids: list) -> list:
    """``ids`` with what llama.cpp adds (``add_special``) for a GGUF file's metadata."""
    model = meta.get("tokenizer.ggml.model")
    (bos, eos, sep), (bos_id, eos_id, sep_id) = GGUF_DEFAULTS[model]
    pre = meta.get("tokenizer.ggml.pre")
    if model == "gpt2":
        bos = pre in GGUF_BOS_PRE
        sep = pre in GGUF_SEP_PRE
    bos = meta.get("tokenizer.ggml.add_bos_token", bos)
    eos = meta.get("tokenizer.ggml.add_eos_token", eos)
    sep = meta.get("tokenizer.ggml.add_sep_token", sep)
    bos_id = meta.get("tokenizer.ggml.bos_token_id", bos_id)
    eos_id = meta.get("tokenizer.ggml.eos_token_id", eos_id)
    sep_id = meta.get("tokenizer.ggml.seperator_token_id", sep_id)
    out = ([bos_id] if bos and bos_id is not None else []) + list(ids)
    if eos and eos_id is not None:
        out.append(eos_id)
    if sep and sep_id is not None:
        out.append(sep_id)
    return out
