"""Hugging Face ``tokenizer.json``: byte-level BPE (GPT-2, Llama 3, Qwen2 families); the
SentencePiece-style BPE and WordPiece files (``hf_families.py``), Unigram and WordLevel
(``hf_models.py``).

The file's parts become a ``Model``: the normalizer becomes a tuple of steps, the pre-tokenizer
a ``PretokSpec`` of the "hf" Unicode family (Oniguruma's tables), ``merges`` the HF-rule merge
list (priority = index, merged id = ``vocab[a + b]``), added tokens marked ``special`` special
tokens under tiktoken's allowed/disallowed contract, the other added tokens vocabulary that is
always cut out. Ids equal ``Tokenizer.encode(text, add_special_tokens=False)``; the
post-processor (e.g. Llama 3's BOS) is applied only with ``add_special_tokens=True``.

What is not supported is refused with an error naming the file and the field, never ignored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import regex

from .. import patterns
from ..bytelevel import CHAR_TO_BYTE
from .bytelevel_gaps import missing_bytes
from ..model import Model
from .post import hf_post
from ..stages.pretok import PrefixSpace, PretokSpec, Split

_NORMALIZERS = {"NFC": "NFC", "NFD": "NFD", "NFKC": "NFKC", "NFKD": "NFKD",
                "Lowercase": "Lowercase"}


class _Fail(ValueError):
    pass


def load_hf(path: "str | Path", *, name: "str | None" = None) -> Model:
    from . import model_cache

    path = Path(path)
    raw = path.read_bytes()
    key = model_cache.make_key("hf_json", hashlib.sha256(raw).hexdigest(), name, path.stem,
                               path.parent.name)
    return model_cache.cached(key, lambda: _load_hf(path, raw, name))


def _load_hf(path: Path, raw: bytes, name: "str | None") -> Model:
    try:
        cfg = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: "
                         f"{e.msg}") from None
    try:
        hf_added_ids(cfg)
        return _model(cfg, name or path.parent.name or path.stem,
                      hashlib.sha256(raw).hexdigest()[:32])
    except _Fail as e:
        raise ValueError(f"{path}: {e}") from None


def hf_added_ids(cfg: dict) -> None:
    """The ids HF gives a tokenizer.json's added tokens, in place of the ids the file states.
    HF adds them in file order: a token whose text is already an added token or a vocabulary
    entry takes that id; any other takes the next id after the largest so far, or the
    vocabulary's size while that is larger. In a file HF wrote the two agree; a file written
    otherwise is read as HF reads it (its stated ids are then not ids). Only for tokenizer.json
    files: a GGUF file's tokens are its ids. Entries that are not checkable are left to the
    loaders' checks."""
    added, model = cfg.get("added_tokens"), cfg.get("model")
    if not isinstance(added, list) or not isinstance(model, dict):
        return
    if not all(isinstance(t, dict) and isinstance(t.get("content"), str)
               and isinstance(t.get("id"), int) for t in added):
        return
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        ids = vocab
    elif isinstance(vocab, list) and all(isinstance(v, list) and v for v in vocab):
        ids = {v[0]: i for i, v in enumerate(vocab)}  # (Unigram: [token, score] by id)
    else:
        return
    size, given, top, out = len(vocab), {}, None, []
    for t in added:
        content = t["content"]
        i = given.get(content)
        if i is None:
            i = ids.get(content)
        if not isinstance(i, int):
            i = size if top is None or top < size else top + 1
        given[content] = i
        top = i if top is None else max(top, i)
        out.append(t if t["id"] == i else {**t, "id": i})
    cfg["added_tokens"] = out


def _need(cond, msg: str) -> None:
    if not cond:
        raise _Fail(msg)


def _model(cfg, name: str, digest: str) -> Model:
    _need(isinstance(cfg, dict), "expected a JSON object (a tokenizer.json)")
    model = cfg.get("model")
    _need(isinstance(model, dict), "no 'model' object: this is not a tokenizer.json")
    if model.get("type") == "WordPiece":
        from .hf_families import wordpiece_model

        return wordpiece_model(cfg, name, digest, _need)
    if model.get("type") in ("Unigram", "WordLevel"):
        from .hf_models import unigram_model, wordlevel_model

        make = unigram_model if model["type"] == "Unigram" else wordlevel_model
        return make(cfg, name, digest, _need)
    _need(model.get("type", "BPE") == "BPE",
          f"model.type {model.get('type')!r} is not supported (BPE, WordPiece, Unigram or "
          "WordLevel)")
    if _spm_style(cfg):
        from .hf_families import spm_model

        return spm_model(cfg, name, digest, _need)
    for key in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
        _need(not model.get(key), f"model.{key} is not supported")
    _need(not model.get("byte_fallback"),
          "model.byte_fallback (sentencepiece-style BPE) is not supported")
    vocab = model.get("vocab")
    _need(isinstance(vocab, dict) and vocab, "model.vocab must be a non-empty object")
    _need("merges" in model, "model.merges is missing (a BPE model needs its merge list)")
    merges_in = model["merges"]
    _need(isinstance(merges_in, list), "model.merges must be a list")
    added = cfg.get("added_tokens") or []
    _need(isinstance(added, list), "added_tokens must be a list")
    added_ids = set()
    for k, t in enumerate(added):
        _need(isinstance(t, dict) and isinstance(t.get("content"), str)
              and isinstance(t.get("id"), int), f"added_tokens[{k}] needs 'content' and 'id'")
        _need(not t.get("single_word"), f"added token {t['content']!r}: single_word is not "
                                        "supported")
        added_ids.add(t["id"])

    decoder: dict[int, bytes] = {}
    spelled_as_text = set()
    # (conditions first, messages only on failure: an f-string per entry was most of the load)
    bad = next((t for t, i in vocab.items() if not isinstance(i, int) or i < 0), None)
    _need(bad is None, f"model.vocab[{bad!r}] = {vocab.get(bad)!r} is not an id")
    for tok, i, b in zip(vocab, vocab.values(), _unspell_all(vocab)):
        if b is None:
            # an entry outside the byte alphabet (Command-R's "\u200d"): a word's symbols are
            # alphabet characters, so no symbol or merge of them is ever this entry, as in HF;
            # it is reached only as an added token. Decoded as its text, as HF's ByteLevel
            # decoder does with a token it cannot map.
            spelled_as_text.add(i)
            b = tok.encode("utf-8")
        if i in decoder:
            _need(False, f"model.vocab gives id {i} to two tokens")
        decoder[i] = b
    by_bytes = {b: i for i, b in decoder.items()
                if i not in added_ids and i not in spelled_as_text}
    merges = _merge_ids(merges_in, vocab)
    gaps = missing_bytes(model, by_bytes, merges, decoder, _need)

    specials, plain = {}, {}
    for t in added:
        (specials if t.get("special") else plain)[t["content"]] = t["id"]
        decoder.setdefault(t["id"], t["content"].encode("utf-8"))
    whole = by_bytes if model.get("ignore_merges") else None
    return Model(
        name=name, pretok=PretokSpec(_pretok_steps(cfg.get("pre_tokenizer")), family="hf"),
        normalizer=_normalizer_steps(cfg.get("normalizer")), decoder=decoder,
        byte_ids=gaps.byte_ids, merges=gaps.merges, whole=whole, specials=specials, added=plain,
        drop_id=gaps.drop_id,
        lstrip=frozenset(t["content"] for t in added if t.get("lstrip")),
        rstrip=frozenset(t["content"] for t in added if t.get("rstrip")), digest=digest,
        post=hf_post(cfg.get("post_processor"), _need))


_UNSPELL = {ord(c): b for c, b in CHAR_TO_BYTE.items()}
_UNSPELL.update({b: 0x10FFFF for b in range(256) if chr(b) not in CHAR_TO_BYTE})


def _unspell_all(tokens) -> list:
    """``bytelevel.unspell`` of every token (None where one is outside the byte alphabet), in
    one translate of the joined text: ~30x faster than a list per token. Latin-1 characters
    outside the alphabet become U+10FFFF, so encoding them fails like any other outsider; the
    separator is NUL's spelling-free stand-in U+10FFFE (no byte maps to it)."""
    tokens = list(tokens)
    parts = "\U0010fffe".join(tokens).translate(_UNSPELL).split("\U0010fffe")
    if len(parts) != len(tokens):  # a token holds the separator: one at a time
        parts = [t.translate(_UNSPELL) for t in tokens]
    out = []
    for t in parts:
        try:
            out.append(t.encode("latin-1"))
        except UnicodeEncodeError:
            out.append(None)
    return out


def _merge_ids(merges_in, vocab: dict) -> list:
    """``(left id, right id, merged id)`` of each merge ("a b" or [a, b]), checked."""
    out = []
    get = vocab.get
    for m in merges_in:
        ab = m.split(" ") if type(m) is str else m
        if type(ab) is list and len(ab) == 2:
            a, b = ab
            if type(a) is str and type(b) is str:
                ia, ib, im = get(a), get(b), get(a + b)
                if ia is not None and ib is not None and im is not None:
                    out.append((ia, ib, im))
                    continue
        k = len(out)  # the first bad entry: say what is wrong with it
        _need(isinstance(ab, list) and len(ab) == 2 and all(isinstance(x, str) for x in ab),
              f"model.merges[{k}] = {m!r}: expected 'a b' or [a, b]")
        for part in (ab[0], ab[1], ab[0] + ab[1]):
            _need(part in vocab, f"model.merges[{k}] = {m!r} refers to {part!r}, not in vocab")
        out.append((vocab[ab[0]], vocab[ab[1]], vocab[ab[0] + ab[1]]))  # (str subclasses)
    return out


def _has_type(spec, kinds: tuple) -> bool:
    """Does a (possibly nested) normalizer/pre_tokenizer/decoder spec use one of ``kinds``?"""
    if not isinstance(spec, dict):
        return False
    if spec.get("type") in kinds:
        return True
    subs = spec.get("normalizers") or spec.get("pretokenizers") or spec.get("decoders") or []
    return any(_has_type(sub, kinds) for sub in subs)


def _spm_style(cfg: dict) -> bool:
    """A SentencePiece-style BPE file (characters, "▁" for spaces) rather than byte-level."""
    return bool(cfg["model"].get("byte_fallback")
                or _has_type(cfg.get("pre_tokenizer"), ("Metaspace",))
                or _has_type(cfg.get("normalizer"), ("Prepend",))
                or _has_type(cfg.get("decoder"), ("Metaspace", "ByteFallback")))


def _normalizer_steps(spec) -> tuple:
    if spec is None:
        return ()
    _need(isinstance(spec, dict), "normalizer must be an object or null")
    kind = spec.get("type")
    if kind == "Sequence":
        return tuple(s for sub in spec.get("normalizers", []) for s in _normalizer_steps(sub))
    _need(kind in _NORMALIZERS, f"normalizer {kind!r} is not supported (supported: "
                                f"{', '.join(_NORMALIZERS)}, Sequence)")
    return (_NORMALIZERS[kind],)


def _pretok_steps(spec) -> tuple:
    if spec is None:
        return ()
    _need(isinstance(spec, dict), "pre_tokenizer must be an object or null")
    kind = spec.get("type")
    if kind == "Sequence":
        return tuple(s for sub in spec.get("pretokenizers", []) for s in _pretok_steps(sub))
    if kind == "Split":
        pat = spec.get("pattern") or {}
        _need(isinstance(pat, dict) and ("Regex" in pat or "String" in pat),
              "pre_tokenizer Split needs pattern.Regex or pattern.String")
        _need(spec.get("behavior", "Isolated") == "Isolated",
              f"pre_tokenizer Split behavior {spec.get('behavior')!r} is not supported")
        _need(not spec.get("invert"), "pre_tokenizer Split with invert=true is not supported")
        source = pat["Regex"] if "Regex" in pat else regex.escape(pat["String"])
        return (Split(source, keep_gaps=True),)
    if kind == "Digits":
        # HF splits off each numeric character (Rust's char::is_numeric: Nd, Nl, No), or each
        # run of them, keeping the rest: an isolated split on \p{N} or \p{N}+
        return (Split(r"\p{N}" if spec.get("individual_digits") else r"\p{N}+", keep_gaps=True),)
    if kind == "ByteLevel":
        steps: tuple = (PrefixSpace(),) if spec.get("add_prefix_space") else ()
        if spec.get("use_regex", True):
            steps += (Split(patterns.BYTELEVEL, keep_gaps=True),)
        return steps
    raise _Fail(f"pre_tokenizer {kind!r} is not supported (supported: Split, Digits, ByteLevel, "
                "Sequence)")
