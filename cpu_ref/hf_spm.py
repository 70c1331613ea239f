"""Reference for SentencePiece-style HF ``tokenizer.json`` files: character-level BPE.

These are what ``transformers`` writes when it converts a SentencePiece BPE model (Llama 2,
Mistral, ...): ``model.type == "BPE"`` over *characters* (no byte-level alphabet), with
``byte_fallback`` for characters outside the vocabulary and ``fuse_unk``. Spaces become "▁"
either in the normaliser (``Prepend("▁")`` + ``Replace(" ", "▁")``, the "legacy" shape) or in a
``Metaspace`` pre-tokenizer. The oracle is HF ``tokenizers`` for the file; that a file matches the
``.model`` it came from is the converter's business, not this module's (it often does not: HF
merges words by merge rank, sentencepiece by piece score).

Pipeline of ``Tokenizer.encode(text, add_special_tokens=False)``, as HF runs it:

    1. added tokens are cut out of the raw text (``normalized: false`` ones; see below);
    2. each remaining segment is normalised on its own (so ``Prepend`` adds a "▁" to *every*
       segment, the one after a special token too);
    3. the pre-tokenizer splits it into words (``Metaspace`` with ``split: false`` keeps one word);
    4. each word: one symbol per character (or its ``<0xXX>`` byte tokens, or ``unk``), then the
       HF merge rule (lowest merge rank, leftmost; ``cpu_ref.bpe.bpe_hf``).

What gputok's fast path must compute
------------------------------------
Normalisation and Metaspace are string rewrites with no context beyond "is this the first
segment"; words then merge independently with the merge table ``(left, right) -> (rank, id)``,
whose symbols are vocabulary tokens (characters, byte tokens, the unk token). The initial symbol
sequence of a word needs the vocabulary's character set: a character in the vocabulary is its id;
otherwise its UTF-8 bytes as ``<0xXX>`` ids when ``byte_fallback`` and all of them exist;
otherwise unk, a run of consecutive unks fused into one when ``fuse_unk``. HF's order quirk must be
kept: a pending (fused) unk is flushed only by the next *known character* or the end of the word,
so byte-fallback tokens emitted meanwhile come out *before* it.

Not supported (a clear ValueError, never silently ignored): added tokens with
``normalized: true``, ``dropout``, ``continuing_subword_prefix``, ``end_of_word_suffix``.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
from pathlib import Path

import regex

from . import bpe, graphemes, hf, specials
from .charsmap import CharsMap

SPACE = "\u2581"


def _unsupported(what: str) -> ValueError:
    return ValueError(f"tokenizer.json: {what} is not supported (SentencePiece-style BPE)")


def normalize(spec: dict | None, text: str) -> str:
    """HF normalisers: ``Prepend``, ``Replace``, ``Sequence`` here, NFC & co. in ``cpu_ref.hf``.

    >>> normalize({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
    ...     {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}, "a b")
    '▁a▁b'
    """
    if spec is None:
        return text
    kind = spec.get("type")
    if kind == "Sequence":
        for sub in spec["normalizers"]:
            text = normalize(sub, text)
        return text
    if kind == "Prepend":
        return spec["prepend"] + text if text else text  # nothing is prepended to ""
    if kind == "Replace":
        return _replace(spec["pattern"], spec["content"], text)
    if kind == "Precompiled":
        return precompiled(_charsmap(spec["precompiled_charsmap"]), text)
    return hf.normalize(spec, text)


@functools.lru_cache(maxsize=8)
def _charsmap(data: str) -> CharsMap:
    return CharsMap(base64.b64decode(data, validate=True))


def _first_rule(cm: CharsMap, data: bytes) -> "str | None":
    """The replacement of the *shortest* key that is a prefix of ``data`` (None: no key); HF's
    walk stops at a NUL byte, so a key holding U+0000 never matches."""
    found = cm.prefixes(data.split(b"\0", 1)[0], 0)
    if not found or found[0][1] >= len(cm.strings):
        return None
    value = found[0][1]
    return cm.strings[value:cm.strings.index(b"\0", value)].decode("utf-8")


def precompiled(cm: CharsMap, text: str) -> str:
    """HF's ``Precompiled``: per grapheme cluster (``cpu_ref.graphemes``), a cluster of under 6
    bytes replaced *whole* by the shortest key that is a prefix of it; otherwise (or with no
    such key) each character by its own key's replacement, if it has one. (sentencepiece takes
    the longest key at each byte instead: ``cpu_ref.spm``.) With the one rule "a" -> "X",
    "a" + U+0301 + "b a" becomes "Xb X": the mark joined the "a" and went with it.
    """
    out = []
    for g in graphemes.clusters(text):
        data = g.encode("utf-8")
        whole = _first_rule(cm, data) if len(data) < 6 else None
        if whole is not None:
            out.append(whole)
            continue
        for ch in g:
            rep = _first_rule(cm, ch.encode("utf-8"))
            out.append(ch if rep is None else rep)
    return "".join(out)


def _replace(pattern: dict, content: str, text: str) -> str:
    if "String" in pattern:
        return text.replace(pattern["String"], content) if pattern["String"] else text
    return regex.sub(pattern["Regex"], lambda _m: content, text)


def pre_tokenize(spec: dict | None, text: str, *, first: bool) -> list[str]:
    """Words of one normalised segment; ``first``: the segment starts the original text."""
    if spec is None:
        return [text] if text else []
    kind = spec.get("type")
    if kind == "Sequence":
        words = [text]
        for sub in spec["pretokenizers"]:
            words = [w for word in words for w in pre_tokenize(sub, word, first=first)]
        return words
    if kind != "Metaspace":
        raise _unsupported(f"pre_tokenizer {kind!r}")
    rep = spec.get("replacement", SPACE)
    scheme = spec.get("prepend_scheme", "always")
    if spec.get("add_prefix_space") is False:
        scheme = "never"
    text = text.replace(" ", rep)
    # Unlike the Prepend normaliser, Metaspace does not add a second "▁" to a segment that
    # already starts with one; "first" prepends only to the segment at offset 0 of the input.
    if text and not text.startswith(rep) and (scheme == "always" or (scheme == "first" and first)):
        text = rep + text
    if not spec.get("split", True):
        return [text] if text else []
    words, cur = [], ""
    for ch in text:  # split before every replacement character ("merged with next")
        if ch == rep and cur:
            words.append(cur)
            cur = ""
        cur += ch
    return words + ([cur] if cur else [])


class RefHFSpm:
    """An SPM-style tokenizer.json, encoded the literal way.

    >>> tok = RefHFSpm({"model": {"type": "BPE", "vocab": {"<unk>": 0, "▁": 1, "a": 2, "▁a": 3},
    ...                           "merges": [["▁", "a"]], "unk_token": "<unk>"},
    ...                 "pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "always"}})
    >>> tok.encode("a a?")
    [3, 3, 0]
    """

    def __init__(self, source: "str | Path | dict"):
        cfg = source if isinstance(source, dict) else json.loads(Path(source).read_text("utf-8"))
        model = cfg["model"]
        if model.get("type") != "BPE":
            raise _unsupported(f"model type {model.get('type')!r}")
        for key in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
            if model.get(key):
                raise _unsupported(f"model.{key}")
        self.vocab: dict[str, int] = model["vocab"]
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)
                  for m in model["merges"]]
        self.merge_rank = {pair: i for i, pair in reversed(list(enumerate(merges)))}
        self.ignore_merges = bool(model.get("ignore_merges", False))
        self.byte_fallback = bool(model.get("byte_fallback", False))
        self.fuse_unk = bool(model.get("fuse_unk", False))
        self.unk_token = model.get("unk_token")
        self.normalizer = cfg.get("normalizer")
        self.pre_tokenizer = cfg.get("pre_tokenizer")
        self.decoder = cfg.get("decoder")
        self.added = {t["content"]: t for t in cfg.get("added_tokens", [])}
        for c, t in self.added.items():
            if t.get("normalized"):
                raise _unsupported(f"added token {c!r} with normalized: true")
        self.special_tokens = {c: t["id"] for c, t in self.added.items() if t.get("special")}
        self.plain_added = {c: t["id"] for c, t in self.added.items() if not t.get("special")}
        self.id_to_token = {i: tok for tok, i in self.vocab.items()}
        self.id_to_token.update({t["id"]: c for c, t in self.added.items()})

    # -- encoding -----------------------------------------------------------------------------

    def initial_symbols(self, word: str) -> list[str]:
        """HF ``BPE::merge_word`` before merging: the vocabulary tokens a word starts as."""
        out: list[str] = []
        unk: str | None = None  # a pending unk token (fused runs stay pending)
        for ch in word:
            if ch in self.vocab:
                if unk is not None:
                    out.append(unk)
                    unk = None
                out.append(ch)
                continue
            if self.byte_fallback:
                # "<0x%02X>" for every UTF-8 byte; all of them or none. The pending unk is *not*
                # flushed here, so it lands after these byte tokens (HF's order, kept on purpose).
                toks = [f"<0x{b:02X}>" for b in ch.encode("utf-8")]
                if all(t in self.vocab for t in toks):
                    out.extend(toks)
                    continue
            if self.unk_token is None:
                continue  # no unk token: HF drops the character
            if self.unk_token not in self.vocab:
                raise ValueError(f"tokenizer.json: unk_token {self.unk_token!r} is not in the "
                                 f"vocabulary")
            # fuse_unk: a run of unknown characters is one unk token; otherwise one each
            if not self.fuse_unk and unk is not None:
                out.append(unk)
            unk = self.unk_token
        return out if unk is None else out + [unk]

    def encode_word(self, word: str) -> list[int]:
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        return bpe.bpe_hf(self.initial_symbols(word), self.vocab, self.merge_rank)

    def encode_ordinary(self, text: str) -> list[int]:
        return self._encode(text, frozenset())

    def encode(self, text: str, *, allowed_special="none", disallowed_special="all") -> list[int]:
        allowed, disallowed = specials.normalize_special_args(
            self.special_tokens.keys(), () if allowed_special == "none" else allowed_special,
            disallowed_special)
        specials.check_disallowed(text, disallowed)
        return self._encode(text, allowed)

    def _encode(self, text: str, allowed: frozenset[str]) -> list[int]:
        text = specials.fix_surrogates(text)
        lstrip = {c for c, t in self.added.items() if t.get("lstrip")}
        rstrip = {c for c, t in self.added.items() if t.get("rstrip")}
        active = allowed | frozenset(self.plain_added)
        out: list[int] = []
        parts = specials.split_specials(text, active)
        # Metaspace's "first" scheme asks whether a segment starts at offset 0 of the input: only
        # the first part can, if it is text and keeps a non-empty remainder after stripping.
        first_is_text = bool(parts) and not parts[0][1]
        for k, (seg, is_added) in enumerate(specials.strip_around(parts, lstrip, rstrip)):
            if is_added:
                out.append(self.added[seg]["id"])
                continue
            first = k == 0 and first_is_text
            for word in pre_tokenize(self.pre_tokenizer, normalize(self.normalizer, seg),
                                     first=first):
                out.extend(self.encode_word(word))
        return out

    # -- decoding -----------------------------------------------------------------------------

    def decode(self, ids, *, skip_special_tokens: bool = True) -> str:
        """HF ``Tokenizer.decode``: tokens (special ones skipped), then the decoder chain."""
        tokens = []
        for i in ids:
            tok = self.id_to_token.get(i)
            if tok is None or (skip_special_tokens and tok in self.special_tokens):
                continue  # HF skips ids it does not know
            tokens.append(tok)
        if self.decoder is None:
            return " ".join(tokens)
        return "".join(decode_chain(self.decoder, tokens))


def decode_chain(spec: dict, tokens: list[str]) -> list[str]:
    """HF decoders, each mapping a list of token strings to a list of strings."""
    kind = spec.get("type")
    if kind == "Sequence":
        for sub in spec["decoders"]:
            tokens = decode_chain(sub, tokens)
        return tokens
    if kind == "Replace":
        return [_replace(spec["pattern"], spec["content"], t) for t in tokens]
    if kind == "Fuse":
        return ["".join(tokens)]
    if kind == "Strip":
        return [_strip(t, spec["content"], spec.get("start", 0), spec.get("stop", 0))
                for t in tokens]
    if kind == "ByteFallback":
        return _byte_fallback(tokens)
    if kind == "Metaspace":
        rep = spec.get("replacement", SPACE)
        scheme = spec.get("prepend_scheme", "always")
        if spec.get("add_prefix_space") is False:
            scheme = "never"
        # Every replacement character of the *first* token is dropped (not only a leading one),
        # unless prepend_scheme is "never"; elsewhere they become spaces.
        return [t.replace(rep, "" if i == 0 and scheme != "never" else " ")
                for i, t in enumerate(tokens)]
    raise _unsupported(f"decoder {kind!r}")


def _strip(token: str, content: str, start: int, stop: int) -> str:
    """At most ``start`` leading and ``stop`` trailing ``content`` characters removed (HF's
    ``content`` is one character).

    >>> _strip("__a__", "_", 1, 5), _strip("___", "_", 2, 2)
    ('_a', '')
    """
    lead = min(len(token) - len(token.lstrip(content)), start)
    rest = token[lead:]
    trail = min(len(rest) - len(rest.rstrip(content)), stop)
    return rest[:len(rest) - trail]


# HF's ByteFallback test: "<0x", two hex digits (either case), ">". Rust's u8::from_str_radix
# also takes a leading "+", and the token must still be 6 bytes long, so "<0x+A>" is byte 10.
_BYTE_TOKEN = regex.compile(r"<0x(\+[0-9A-Fa-f]|[0-9A-Fa-f]{2})>")


def _parse_byte_token(token: str) -> int | None:
    m = _BYTE_TOKEN.fullmatch(token)
    return None if m is None else int(m.group(1), 16)


def _byte_fallback(tokens: list[str]) -> list[str]:
    """Runs of byte tokens become their UTF-8 text, or one U+FFFD *per byte* if the run is not
    valid UTF-8 as a whole (so one bad byte spoils its whole run)."""
    out: list[str] = []
    for is_bytes, group in itertools.groupby(tokens, lambda t: _parse_byte_token(t) is not None):
        if not is_bytes:
            out += group
            continue
        run = bytes(_parse_byte_token(t) for t in group)
        try:
            out.append(run.decode("utf-8"))
        except UnicodeDecodeError:
            out += ["\ufffd"] * len(run)
    return out
