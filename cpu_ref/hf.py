"""Reference for Hugging Face ``tokenizer.json`` files with a byte-level BPE model.

The pipeline HF runs for ``Tokenizer.encode(text, add_special_tokens=False)``:

    1. added tokens are cut out of the raw text first (leftmost-longest match; ``lstrip`` /
       ``rstrip`` let a token swallow the whitespace beside it);
    2. every other segment is normalized (NFC etc.), then pre-tokenized (``Split`` regex,
       ``ByteLevel``), giving words;
    3. each word's UTF-8 bytes are mapped to the GPT-2 "bytes to unicode" alphabet, and BPE
       (the HF rule, see ``bpe.bpe_hf``) turns it into vocab ids.

gputok applies tiktoken's special-token contract on top (see ``specials``): added tokens marked
``special`` are control tokens and must be allowed explicitly; added tokens that are not special
are ordinary vocabulary and are always cut out, as HF does. The post-processor (e.g. Llama 3's
BOS template) is not applied: ids are those of ``encode(..., add_special_tokens=False)``.

What is not supported is refused with a clear error naming the field, never silently ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import bpe, patterns, specials
from . import unicode as pinned  # HF's own normaliser data (NFC: Unicode 9.0)

# HF ByteLevel's own regex (use_regex=true): the original GPT-2 pattern.
BYTELEVEL_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable unicode characters.

    Bytes that are printable Latin-1 characters ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves;
    the remaining 68 bytes, in increasing order, map to U+0100, U+0101, ... so that no byte maps
    to whitespace or a control character (BPE vocab files are text and split on spaces).
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(0x100 + extra)
            extra += 1
    return mapping


BYTE_TO_UNICODE = bytes_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}


def _unsupported(what: str) -> ValueError:
    return ValueError(f"tokenizer.json: {what} is not supported (byte-level BPE only)")


def normalize(spec: dict | None, text: str) -> str:
    if spec is None:
        return text
    kind = spec.get("type")
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return pinned.normalize(kind, text)
    if kind == "Sequence":
        for sub in spec["normalizers"]:
            text = normalize(sub, text)
        return text
    if kind == "Lowercase":
        return pinned.lowercase(text)
    raise _unsupported(f"normalizer {kind!r}")


def pre_tokenize(spec: dict | None, text: str) -> list[str]:
    """Words of ``text`` (before the byte-level mapping)."""
    words = [text]
    for step in _flatten(spec):
        kind = step.get("type")
        if kind == "Split":
            pat = step["pattern"]
            regex_src = pat["Regex"] if "Regex" in pat else _escape(pat["String"])
            if step.get("behavior", "Isolated") != "Isolated":
                raise _unsupported(f"Split behavior {step.get('behavior')!r}")
            words = [p for w in words for p in patterns.split_isolated(regex_src, w)]
        elif kind == "Digits":
            # each numeric character (Rust's char::is_numeric: N*) or each run of them, isolated
            digits = r"\p{N}" if step.get("individual_digits") else r"\p{N}+"
            words = [p for w in words for p in patterns.split_isolated(digits, w)]
        elif kind == "ByteLevel":
            if step.get("add_prefix_space"):
                words = [w if w.startswith(" ") else " " + w for w in words]
            if step.get("use_regex", True):
                words = [p for w in words for p in patterns.split_isolated(BYTELEVEL_PATTERN, w)]
        else:
            raise _unsupported(f"pre_tokenizer {kind!r}")
    return words


def _flatten(spec: dict | None) -> list[dict]:
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        return [s for sub in spec["pretokenizers"] for s in _flatten(sub)]
    return [spec]


def _escape(s: str) -> str:
    import regex

    return regex.escape(s)


class RefHF:
    """A tokenizer.json byte-level BPE, encoded the literal way."""

    def __init__(self, source: "str | Path | dict"):
        cfg = source if isinstance(source, dict) else json.loads(Path(source).read_text("utf-8"))
        model = cfg["model"]
        if model.get("type") != "BPE":
            raise _unsupported(f"model type {model.get('type')!r}")
        for key in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
            if model.get(key):
                raise _unsupported(f"model.{key}")
        self.vocab: dict[str, int] = model["vocab"]
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.merge_rank = {pair: i for i, pair in reversed(list(enumerate(merges)))}
        self.ignore_merges = bool(model.get("ignore_merges", False))
        self.unk_token = model.get("unk_token")
        self.fuse_unk = bool(model.get("fuse_unk", False))
        if model.get("byte_fallback"):
            raise _unsupported("model.byte_fallback")
        self.normalizer = cfg.get("normalizer")
        self.pre_tokenizer = cfg.get("pre_tokenizer")
        self.added = {t["content"]: t for t in cfg.get("added_tokens", [])}
        self.special_tokens = {c: t["id"] for c, t in self.added.items() if t.get("special")}
        self.plain_added = {c: t["id"] for c, t in self.added.items() if not t.get("special")}
        self.id_to_bytes: dict[int, bytes] = {
            i: bytes(UNICODE_TO_BYTE[ch] for ch in tok) for tok, i in self.vocab.items()
            if all(ch in UNICODE_TO_BYTE for ch in tok)
        }
        for c, t in self.added.items():
            self.id_to_bytes[t["id"]] = c.encode("utf-8")

    def encode_word(self, word: str) -> list[int]:
        spelled = "".join(BYTE_TO_UNICODE[b] for b in word.encode("utf-8"))
        if self.ignore_merges and spelled in self.vocab:
            return [self.vocab[spelled]]  # the whole word first, before any symbol is looked up
        return bpe.bpe_hf(self.symbols(spelled), self.vocab, self.merge_rank)

    def symbols(self, spelled: str) -> list[str]:
        """The word's first symbols: one per character of its byte-level spelling, as HF's BPE
        model looks each up in ``model.vocab`` before merging.

        Byte-level vocabularies need not hold all 256 bytes (DeepSeek, Falcon, MPT, StarCoder,
        Refact lack 13-28). HF's rule for a character that is not in the vocabulary:

        * no ``unk_token``: the character is skipped. Its neighbours become adjacent, so a merge
          can join them across it (".\x03." merges like "..").
        * ``unk_token`` set: the character becomes the unk token's symbol, which takes part in
          merging like any other (its pairs are looked up in ``merges``); with ``fuse_unk``,
          consecutive unknown characters make one unk symbol. An ``unk_token`` that is not in
          the vocabulary is an error, raised only when an unknown character occurs.
        * ``byte_fallback`` is not used for byte-level files (gputok refuses it there).

        The whole-word lookup of ``ignore_merges`` sees the word as it is, unknowns included.
        The bytes 0xC0, 0xC1 and 0xF5-0xFF are never in UTF-8 text (text is str, and bytes input
        is decoded first, its invalid sequences raising or replaced by U+FFFD), so only the
        other missing bytes (controls, 0xF1, 0xF2, ...) ever meet this rule.
        """
        out: list[str] = []
        unknown_last = False
        for ch in spelled:
            if ch in self.vocab:
                out.append(ch)
                unknown_last = False
                continue
            if self.unk_token is None:
                continue  # skipped: the neighbours meet
            if self.unk_token not in self.vocab:
                raise ValueError(f"tokenizer.json: unk_token {self.unk_token!r} is not in the "
                                 "vocabulary (HF fails on the first unknown character too)")
            if not (self.fuse_unk and unknown_last):
                out.append(self.unk_token)
            unknown_last = True
        return out

    def encode_ordinary(self, text: str) -> list[int]:
        """Plain text: no added-token splitting of control tokens (non-special added tokens are
        still split out, as they are vocabulary)."""
        return self._encode(text, frozenset())

    def encode(self, text: str, *, allowed_special="none", disallowed_special="all") -> list[int]:
        allowed, disallowed = specials.normalize_special_args(
            self.special_tokens.keys(), () if allowed_special == "none" else allowed_special,
            disallowed_special)
        specials.check_disallowed(text, disallowed)
        return self._encode(text, allowed)

    def _encode(self, text: str, allowed: frozenset[str]) -> list[int]:
        text = specials.fix_surrogates(text)
        out: list[int] = []
        for seg, is_added in self._split_added(text, allowed | frozenset(self.plain_added)):
            if is_added:
                out.append(self.added[seg]["id"])
                continue
            for word in pre_tokenize(self.pre_tokenizer, normalize(self.normalizer, seg)):
                out.extend(self.encode_word(word))
        return out

    def _split_added(self, text: str, active: frozenset[str]) -> list[tuple[str, bool]]:
        """Like specials.split_specials, plus the lstrip/rstrip options of added tokens."""
        lstrip = {c for c, t in self.added.items() if t.get("lstrip")}
        rstrip = {c for c, t in self.added.items() if t.get("rstrip")}
        return specials.strip_around(specials.split_specials(text, active), lstrip, rstrip)

    def decode_bytes(self, tokens) -> bytes:
        return b"".join(self.id_to_bytes[t] for t in tokens)
