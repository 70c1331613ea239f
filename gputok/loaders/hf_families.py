"""The SentencePiece-style BPE and WordPiece parts of the ``tokenizer.json`` loader.

``hf_json.load_hf`` reads the file and hands its object here when ``model.type`` is
``WordPiece``, or when the BPE model works on characters (``byte_fallback``, a ``Metaspace``
pre-tokenizer, a ``Prepend`` normaliser or a ``ByteFallback``/``Metaspace`` decoder). What is
not supported is refused with an error naming the field, never ignored. Ids equal
``Tokenizer.encode(text, add_special_tokens=False)``; with ``add_special_tokens=True`` the file's
post-processor adds what HF adds (BERT's [CLS] ... [SEP], Llama's <s>: ``loaders/post.py``).
"""

from __future__ import annotations

import numpy as np
import regex

from ..components.decoders import HFDecoder
from ..components.normalizers import BertNormalizer, HFSteps
from ..components.pretokenizers import BertPreTokenizer, Metaspace, Pretokenizer, Sequence, Whole
from ..components.segmenters.hf_charbpe import HFSpmFamily
from ..components.segmenters.wordpiece import WordPieceFamily
from ..model import Model
from .post import hf_post
from ..stages.normalize import STEPS
from ..stages.pretok import PretokSpec, Split

_UNICODE_STEPS = {s: s for s in STEPS}


def _added(cfg: dict, need) -> tuple[dict, dict, list]:
    added = cfg.get("added_tokens") or []
    need(isinstance(added, list), "added_tokens must be a list")
    specials, plain = {}, {}
    for k, t in enumerate(added):
        need(isinstance(t, dict) and isinstance(t.get("content"), str)
             and isinstance(t.get("id"), int), f"added_tokens[{k}] needs 'content' and 'id'")
        need(not t.get("single_word"), f"added token {t['content']!r}: single_word is not "
                                       "supported")
        need(not t.get("normalized"), f"added token {t['content']!r}: normalized: true is not "
                                      "supported for this model type")
        (specials if t.get("special") else plain)[t["content"]] = t["id"]
    return specials, plain, added


def _vocab(model: dict, need) -> dict:
    vocab = model.get("vocab")
    need(isinstance(vocab, dict) and vocab,
         f"model.vocab of a {model.get('type', 'BPE')} model must be a non-empty object")
    # (conditions first, messages only on failure: an f-string per entry cost seconds)
    bad = next((t for t, i in vocab.items() if not isinstance(i, int) or i < 0), None)
    need(bad is None, f"model.vocab[{bad!r}] = {vocab.get(bad)!r} is not an id")
    if len(set(vocab.values())) != len(vocab):
        seen: dict = {}
        for tok, i in vocab.items():
            need(i not in seen, f"model.vocab gives id {i} to {seen.get(i)!r} and {tok!r}")
            seen[i] = tok
    return vocab


def _spm_norm_steps(spec, need) -> tuple:
    if spec is None:
        return ()
    need(isinstance(spec, dict), "normalizer must be an object or null")
    kind = spec.get("type")
    if kind == "Sequence":
        return tuple(s for sub in spec.get("normalizers", []) for s in _spm_norm_steps(sub, need))
    if kind == "Prepend":
        return (("prepend", spec.get("prepend", "")),)
    if kind == "Precompiled":
        return (("precompiled", _precompiled(spec.get("precompiled_charsmap"), need)),)
    if kind == "Replace":
        pat = spec.get("pattern") or {}
        if "String" in pat:
            return (("replace", pat["String"], spec.get("content", "")),)
        need("Regex" in pat, "normalizer Replace needs pattern.String or pattern.Regex")
        return (("replace_regex", regex.compile(pat["Regex"]), spec.get("content", "")),)
    need(kind in _UNICODE_STEPS, f"normalizer {kind!r} is not supported for SentencePiece-style "
                                 f"BPE (supported: Prepend, Replace, Precompiled, "
                                 f"{', '.join(STEPS)}, Sequence)")
    return ((_UNICODE_STEPS[kind],),)


def _precompiled(data, need):
    """HF ``Precompiled``: the base64 charsmap (HF refuses an empty or malformed one too)."""
    import base64
    import binascii

    from ..components.normalizers.charsmap import CharsMap, CharsMapError
    from ..components.normalizers.precompiled import PrecompiledNormalizer

    need(isinstance(data, str) and data, "normalizer Precompiled needs a precompiled_charsmap")
    try:
        cm = CharsMap(base64.b64decode(data, validate=True), where="normalizer Precompiled")
        cm.check_utf8()
    except (binascii.Error, CharsMapError) as e:
        need(False, f"normalizer Precompiled: the precompiled_charsmap is malformed ({e})")
    return PrecompiledNormalizer(cm)


def _metaspace(spec, need):
    if spec is None:
        return Whole()
    need(isinstance(spec, dict), "pre_tokenizer must be an object or null")
    if spec.get("type") == "Sequence":
        subs = [s for s in spec.get("pretokenizers", []) if s is not None]
        need(len(subs) <= 1, "pre_tokenizer: a Sequence of several steps is not supported for "
                             "SentencePiece-style BPE")
        return _metaspace(subs[0], need) if subs else Whole()
    need(spec.get("type") == "Metaspace", f"pre_tokenizer {spec.get('type')!r} is not supported "
                                          "for SentencePiece-style BPE (Metaspace or none)")
    scheme = spec.get("prepend_scheme", "always")
    if spec.get("add_prefix_space") is False:
        scheme = "never"
    need(scheme in ("always", "first", "never"), f"Metaspace prepend_scheme {scheme!r}?")
    rep = spec.get("replacement", "\u2581")
    need(isinstance(rep, str) and len(rep) == 1, "Metaspace replacement must be one character")
    return Metaspace(rep, scheme, bool(spec.get("split", True)))


# HF's Whitespace (``\w+|[^\w\s]+`` in Oniguruma) and WhitespaceSplit as regexes (what they
# drop: the text they do not match). Oniguruma's \w has ZWNJ and ZWJ (Join_Control) and not
# the Latin-1 superscripts and fractions (No), which the pinned "hf" \w class has the other
# way round: probed over every code point against tokenizers 0.23 (tests/test_wordlevel.py)
_NOT_WORD = "\u00b2\u00b3\u00b9\u00bc-\u00be"
_WHITESPACE = (rf"(?:[^\W{_NOT_WORD}]|[\u200c\u200d])+"
               rf"|(?:[^\w\s\u200c\u200d]|[{_NOT_WORD}])+")
_WHITESPACE_SPLIT = r"\S+"
_PRETOKENIZERS = ("Whitespace", "WhitespaceSplit", "BertPreTokenizer", "Metaspace", "Split",
                  "Sequence")


def _pretokenizer(spec, need):
    if spec is None:
        return Whole()
    need(isinstance(spec, dict), "pre_tokenizer must be an object or null")
    kind = spec.get("type")
    need(kind in _PRETOKENIZERS, f"pre_tokenizer {kind!r} is not supported for this model type "
                                 f"(supported: {', '.join(_PRETOKENIZERS)})")
    if kind == "Sequence":
        steps = [_pretokenizer(s, need) for s in spec.get("pretokenizers", []) if s is not None]
        try:
            return steps[0] if len(steps) == 1 else Sequence(steps)
        except ValueError as e:
            need(False, str(e))
    if kind == "Metaspace":
        return _metaspace(spec, need)
    if kind == "BertPreTokenizer":
        return BertPreTokenizer()
    if kind == "Split":
        pat = spec.get("pattern") or {}
        need(isinstance(pat, dict) and ("Regex" in pat or "String" in pat),
             "pre_tokenizer Split needs pattern.Regex or pattern.String")
        need(spec.get("behavior", "Isolated") == "Isolated" and not spec.get("invert"),
             "pre_tokenizer Split: only behavior Isolated without invert is supported")
        import regex

        source = pat["Regex"] if "Regex" in pat else regex.escape(pat["String"])
        return Pretokenizer(PretokSpec((Split(source, keep_gaps=True),), family="hf"))
    return Pretokenizer(PretokSpec((Split(_WHITESPACE if kind == "Whitespace"
                                          else _WHITESPACE_SPLIT),), family="hf"))


def spm_model(cfg: dict, name: str, digest: str, need) -> Model:
    """An SPM-style BPE tokenizer.json (see ``components/segmenters/hf_charbpe.py``)."""
    model = cfg["model"]
    for key in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
        need(not model.get(key), f"model.{key} is not supported")
    vocab = _vocab(model, need)
    merges_in = model.get("merges")
    need(isinstance(merges_in, list), "model.merges must be a list")
    merges = []
    for m in merges_in:
        ab = m.split(" ", 1) if type(m) is str else m
        if type(ab) is list and len(ab) == 2:
            a, b = ab
            if type(a) is str and type(b) is str and a in vocab and b in vocab \
                    and a + b in vocab:
                merges.append((a, b))
                continue
        k = len(merges)  # the first bad entry: say what is wrong with it
        need(isinstance(ab, list) and len(ab) == 2 and all(isinstance(x, str) for x in ab),
             f"model.merges[{k}] = {m!r}: expected 'a b' or [a, b]")
        for part in (ab[0], ab[1], ab[0] + ab[1]):
            need(part in vocab, f"model.merges[{k}] = {m!r} refers to {part!r}, not in vocab")
        merges.append((ab[0], ab[1]))  # (str subclasses: valid, only not on the fast path)
    specials, plain, added = _added(cfg, need)
    fam = HFSpmFamily(vocab=vocab, merges=merges, byte_fallback=bool(model.get("byte_fallback")),
                      fuse_unk=bool(model.get("fuse_unk")), unk_token=model.get("unk_token"),
                      ignore_merges=bool(model.get("ignore_merges")), where=name)
    tokens = {i: t for t, i in vocab.items()}
    tokens.update({t["id"]: t["content"] for t in added})
    decoder = {}
    for i, t in tokens.items():
        b = fam.byte_tok is not None and _byte_value(t)
        decoder[i] = bytes([b]) if b is not None and b is not False else \
            t.replace("\u2581", " ").encode("utf-8")
    try:
        detok = HFDecoder(tokens, cfg.get("decoder"), skip=set(specials.values()),
                          where="tokenizer.json")
    except ValueError as e:
        need(False, str(e).replace("tokenizer.json: ", ""))
    byte_ids = np.array([fam.byte_tok[b] if fam.byte_tok and fam.byte_tok[b] is not None else 0
                         for b in range(256)], np.uint32)
    return Model(name=name, decoder=decoder, byte_ids=byte_ids, specials=specials,
                 added=plain, lstrip=frozenset(t["content"] for t in added if t.get("lstrip")),
                 rstrip=frozenset(t["content"] for t in added if t.get("rstrip")),
                 digest=digest, segmenter=fam,
                 normalizer=HFSteps(_spm_norm_steps(cfg.get("normalizer"), need)),
                 pretokenizer=_metaspace(cfg.get("pre_tokenizer"), need), detok=detok,
                 post=hf_post(cfg.get("post_processor"), need))


def _byte_value(tok: str) -> "int | None":
    if len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
        try:
            return int(tok[3:5], 16)
        except ValueError:
            return None
    return None


def wordpiece_model(cfg: dict, name: str, digest: str, need) -> Model:
    """A BERT tokenizer.json: BertNormalizer (or none), BertPreTokenizer (or another pre-tokenizer
    of ``hf_models``), WordPiece (the stage is ``components/segmenters/wordpiece.py``)."""
    model = cfg["model"]
    vocab = _vocab(model, need)
    unk = model.get("unk_token", "[UNK]")
    need(unk in vocab, f"model.unk_token {unk!r} is not in model.vocab")
    norm = cfg.get("normalizer")
    need(norm is None or (isinstance(norm, dict) and norm.get("type") == "BertNormalizer"),
         f"normalizer {norm.get('type') if isinstance(norm, dict) else norm!r} is not supported "
         "for WordPiece (BertNormalizer or none)")
    pre = cfg.get("pre_tokenizer")
    if isinstance(pre, dict) and pre.get("type") == "BertPreTokenizer":
        pretokenizer = BertPreTokenizer()  # (fused with BertNormalizer: one pass, native too)
    else:  # Whitespace, WhitespaceSplit, Split, a Sequence of them: a pattern pre-tokenizer
        pretokenizer = _pretokenizer(pre, need)
    specials, plain, added = _added(cfg, need)
    for t in added:
        need(not t.get("lstrip") and not t.get("rstrip"),
             f"added token {t['content']!r}: lstrip/rstrip are not supported for WordPiece")
    normalizer = () if norm is None else BertNormalizer(
        clean_text=norm.get("clean_text", True),
        handle_chinese_chars=norm.get("handle_chinese_chars", True),
        strip_accents=norm.get("strip_accents"), lowercase=norm.get("lowercase", True))
    # HF keeps the prefix as written: "" (nomic-bert) makes continuations plain vocabulary
    # entries, so `or "##"` would turn every continuation into [UNK]
    prefix = model.get("continuing_subword_prefix", "##")
    need(isinstance(prefix, str), f"model.continuing_subword_prefix must be a string, not "
                                  f"{prefix!r}")
    fam = WordPieceFamily(vocab, unk_token=unk, prefix=prefix,
                          max_input_chars_per_word=model.get("max_input_chars_per_word", 100),
                          where=name)
    tokens = {i: t for t, i in vocab.items()}
    tokens.update({t["id"]: t["content"] for t in added})
    dec = cfg.get("decoder")
    try:
        detok = HFDecoder(tokens, dec, skip=set(specials.values()), where="tokenizer.json")
    except ValueError as e:
        need(False, str(e).replace("tokenizer.json: ", ""))
    return Model(name=name, decoder={i: t.encode("utf-8") for i, t in tokens.items()},
                 byte_ids=np.full(256, fam.unk_id, np.uint32), specials=specials, added=plain,
                 digest=digest, segmenter=fam, normalizer=normalizer,
                 pretokenizer=pretokenizer, detok=detok,
                 post=hf_post(cfg.get("post_processor"), need))
