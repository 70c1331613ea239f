"""Decoders of the families whose text is more than the concatenation of token bytes.

Byte-level BPE decodes by joining bytes (``ByteDecoder``, ``gputok/decode.py``). The other
families decode as their library does, and ``Encoding.decode`` equals it exactly:

* ``SpmDecoder`` -- sentencepiece's ``decode``: control pieces vanish, unk is the unk surface
  (" \\u2047 "), "▁" is a space, the dummy prefix's "▁" is dropped from the first piece (every
  leading "▁" piece with ``remove_extra_whitespaces``), and a run of byte pieces that is not
  valid UTF-8 gives one U+FFFD *per byte* that does not start a valid character (Python's
  ``errors="replace"`` would merge a truncated sequence into one);
* ``HFDecoder`` -- an HF ``tokenizer.json`` decoder chain (``Replace``, ``ByteFallback``,
  ``Fuse``, ``Strip``, ``Metaspace``, ``WordPiece``) over the tokens of the ids, special tokens
  skipped as ``Tokenizer.decode`` does by default. Its ``ByteFallback`` turns a byte run that is
  not valid UTF-8 into one U+FFFD per byte of the run.

``decode_bytes`` gives the same text before any replacement (invalid byte runs as their raw
bytes), so ``decode_bytes(ids).decode("utf-8")`` equals ``decode(ids)`` whenever the bytes are
valid; ``decode(ids, errors="strict")`` raises where they are not.
"""

from __future__ import annotations

import codecs
import functools
import operator

import numpy as np

from ...decode import as_int_list
from ..segmenters.pieces import SPACE_UTF8

_PER_BYTE = "gputok.perbyte"


def _per_byte(e: UnicodeDecodeError):
    return "\ufffd", e.start + 1  # one U+FFFD, then go on at the next byte


codecs.register_error(_PER_BYTE, _per_byte)


def _ids(tokens, n_vocab: int) -> list:
    ids = as_int_list(tokens)
    for i in ids:
        if not 0 <= i < n_vocab:
            raise KeyError(f"invalid token for decoding: {i}")
    return ids


class SpmDecoder:
    """sentencepiece's decoding of one model (see the module docstring); ``fam`` is its
    ``components.segmenters.spm_bpe.SpmFamily``."""

    def __init__(self, fam, table=None, types=None):
        from ..segmenters.pieces import PieceTable
        from ..segmenters.spm_bpe import BYTE, CONTROL, UNKNOWN_T

        self.fam = fam
        if table is None:
            table = PieceTable.from_lists(fam.pieces, [0.0] * fam.n_vocab, fam.types)
        self.table = table
        self.type_codes = np.asarray(types if types is not None else table.types, np.uint8)
        self.n_vocab = fam.n_vocab
        self.byte, self.control, self.unknown = BYTE, CONTROL, UNKNOWN_T
        self.unk_id = fam.unk_id
        self.surface = bool(fam.unk_surface)
        self.strip, self.all_ws = fam.decode_strip, fam.decode_all_ws

    # decode's tables, built on the first decode (a load does not pay for them)
    @functools.cached_property
    def types(self) -> list:
        return self.type_codes.tolist()

    @functools.cached_property
    def parts(self) -> list:
        """Each piece's bytes in decoded text: "▁" as a space, a byte piece as its byte, a
        control piece as nothing, unk as the unk surface."""
        fam, types = self.fam, self.type_codes
        blob, off = self.table.spaced
        ol = off.tolist()
        parts = [blob[a:b] for a, b in zip(ol, ol[1:])]
        for i in np.flatnonzero(types == self.byte).tolist():
            p = self.table.text(i)
            parts[i] = bytes([int(p[3:5], 16)]) if p.startswith("<0x") else b""
        for i in np.flatnonzero(types == self.control).tolist():
            parts[i] = b""
        surface = fam.unk_surface.encode("utf-8")
        for i in np.flatnonzero(types == self.unknown).tolist() + [fam.unk_id] * (
                fam.unk_id >= 0):
            parts[i] = surface
        return parts

    @functools.cached_property
    def lead(self) -> list:
        """The piece starts with "▁" (a strippable leading space)."""
        t = self.type_codes
        return (self.table.starts_with(SPACE_UTF8) & (t != self.byte) & (t != self.control)
                & (t != self.unknown)).tolist()

    @functools.cached_property
    def marked(self) -> tuple:
        """Each piece's bytes with a control piece as NUL (it ends a run of byte pieces, as
        "\x00" does, and goes after decoding)."""
        marked = list(self.parts)
        for i in np.flatnonzero(self.type_codes == self.control).tolist():
            marked[i] = b"\x00"
        return tuple(marked)

    @functools.cached_property
    def nul(self) -> "int | None":
        """The byte piece <0x00> (its NUL must stay: the per-run path)."""
        parts = self.parts
        return next((i for i in np.flatnonzero(self.type_codes == self.byte).tolist()
                     if parts[i] == b"\x00"), None)

    @functools.cached_property
    def odd(self) -> frozenset:
        """Pieces (not byte pieces) whose bytes hold a NUL (the one sentencepiece skips) or
        are not UTF-8 alone (none: checked at load): the per-run path."""
        fam = self.fam
        blob, off = self.table.spaced
        at = np.flatnonzero(np.frombuffer(blob, np.uint8) == 0)
        ids = np.unique(np.searchsorted(off, at, "right") - 1)
        t = self.type_codes
        unk = (t[ids] == self.unknown) | (ids == fam.unk_id)
        odd = set(ids[(t[ids] != self.byte) & (t[ids] != self.control) & ~unk].tolist())
        if "\0" in fam.unk_surface:
            odd.update(np.flatnonzero(t == self.unknown).tolist() + [fam.unk_id] * (
                fam.unk_id >= 0))
        return frozenset(odd)

    def is_byte(self, i: int) -> bool:
        return self.types[i] == self.byte

    def stream(self, errors: str = "replace") -> "SpmStreamDecoder":
        return SpmStreamDecoder(self, errors)

    def _stripped(self, ids: list) -> list:
        """Indexes of the ids whose leading space sentencepiece drops (``cpu_ref.spm.decode``'s
        ``at_bos`` walk: only while no text has been produced yet)."""
        if not self.strip:
            return []
        types, out = self.types, []
        pending = seen_ws = nonempty = False
        for k, i in enumerate(ids):
            t = types[i]
            if t == self.byte:
                pending = True
                continue
            if pending:
                nonempty, pending = True, False
            if seen_ws or nonempty:
                break  # at_bos is over
            if t == self.control:
                continue
            if t == self.unknown or i == self.unk_id:
                nonempty = self.surface
                continue
            if self.lead[i]:
                out.append(k)
                seen_ws = not self.all_ws
                nonempty = len(self.parts[i]) > 1
            else:
                nonempty = bool(self.parts[i])
        return out

    def _parts(self, ids: list) -> list:
        parts = self.parts
        out = [parts[i] for i in ids]
        for k in self._stripped(ids):
            out[k] = out[k][1:]
        return out

    def decode_bytes(self, tokens) -> bytes:
        return b"".join(self._parts(_ids(tokens, self.n_vocab)))

    def _joined_decode(self, ids: list) -> "str | None":
        """``decode`` as C calls: the pieces' bytes looked up and joined, decoded once with one
        U+FFFD per byte that starts no character (a Python loop per id, as ``_parts`` does, was
        1.5x sentencepiece's decode). Text pieces are whole characters, so a run of byte pieces
        ends where text starts, as in the per-run path; a control piece is a NUL that ends a run
        too, removed after. The leading spaces sentencepiece drops are the text's first
        characters. None where a NUL in the text may be a byte piece's (the caller's per-run
        path)."""
        if min(ids) < 0:
            _ids(ids, self.n_vocab)  # (raises, naming the id)
        try:
            parts = operator.itemgetter(*ids)(self.marked)
        except IndexError:
            _ids(ids, self.n_vocab)
            raise
        text = (parts if len(ids) == 1 else b"".join(parts)).decode("utf-8", _PER_BYTE)
        if "\x00" in text:
            if self.nul is not None and self.nul in ids:
                return None
            text = text.replace("\x00", "")
        return text[len(self._stripped(ids)):] if self.strip else text

    def decode(self, tokens, errors: str = "replace") -> str:
        ids = as_int_list(tokens)
        if errors == "replace" and ids and (not self.odd or self.odd.isdisjoint(ids)):
            got = self._joined_decode(ids)
            if got is not None:
                return got
        ids = _ids(ids, self.n_vocab)
        parts = self._parts(ids)
        if errors != "replace":
            return b"".join(parts).decode("utf-8", errors)
        # byte runs are decoded on their own: a control piece between two runs separates them
        types, control = self.types, self.control
        out, run = [], []
        for i, p in zip(ids, parts):
            if types[i] == control:
                out.append(b"".join(run).decode("utf-8", _PER_BYTE))
                run = []
            else:
                run.append(p)
        out.append(b"".join(run).decode("utf-8", _PER_BYTE))
        return "".join(out)


# ---- HF decoder chains ---------------------------------------------------------------------------

def _byte_token(tok: str) -> "int | None":
    """HF's ByteFallback test: 6 UTF-8 bytes, "<0x" + two hex digits + ">" (Rust's
    ``from_str_radix`` also takes "<0x+A>")."""
    if len(tok) != 6 or not tok.startswith("<0x") or not tok.endswith(">"):
        return None
    digits = tok[3:5]
    if digits.startswith("+"):
        digits = digits[1:]
    if not digits or any(c not in "0123456789abcdefABCDEF" for c in digits):
        return None
    return int(digits, 16)


class HFDecoder:
    """An HF decoder chain; ``tokens``: id -> token string; ``skip``: ids not decoded
    (special tokens); unknown ids are skipped, as HF does.

    >>> d = HFDecoder({0: "▁a", 1: "<0xC3>", 2: "<0xA9>"}, {"type": "Sequence", "decoders": [
    ...     {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    ...     {"type": "ByteFallback"}, {"type": "Fuse"},
    ...     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})
    >>> d.decode([0, 1, 2])
    'aé'
    """

    def __init__(self, tokens: dict, spec: "dict | None", *, skip=frozenset(),
                 n_vocab: "int | None" = None, where: str = "tokenizer.json"):
        self.tokens = tokens
        self.spec = spec
        self.skip = frozenset(skip)
        self.n_vocab = n_vocab if n_vocab is not None else max(tokens, default=-1) + 1
        check_chain(spec, where)

    def decode(self, tokens, errors: str = "replace") -> str:
        ids = as_int_list(tokens)
        toks = [self.tokens[i] for i in ids if i in self.tokens and i not in self.skip]
        if self.spec is None:
            return " ".join(toks)
        if errors == "replace":
            return "".join(run_chain(self.spec, toks, "hf"))
        text = "".join(run_chain(self.spec, toks, "raw"))
        raw = text.encode("utf-8", "surrogateescape")
        return raw.decode("utf-8", errors) if errors != "surrogateescape" else text

    def decode_bytes(self, tokens) -> bytes:
        return self.decode(tokens, "surrogateescape").encode("utf-8", "surrogateescape")

    def is_byte(self, i: int) -> bool:
        t = self.tokens.get(i)
        return t is not None and _byte_token(t) is not None

    def stream(self, errors: str = "replace") -> "FamilyStreamDecoder":
        return FamilyStreamDecoder(self, self.is_byte, errors)


_CHAIN = ("Sequence", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace", "WordPiece")


def check_chain(spec, where: str) -> None:
    if spec is None:
        return
    kind = spec.get("type")
    if kind not in _CHAIN:
        raise ValueError(f"{where}: decoder {kind!r} is not supported (supported: "
                         f"{', '.join(_CHAIN)})")
    if kind == "Sequence":
        for sub in spec.get("decoders", []):
            check_chain(sub, where)
    if kind == "Replace" and "String" not in (spec.get("pattern") or {}):
        raise ValueError(f"{where}: decoder Replace with a regex pattern is not supported")


def run_chain(spec: dict, toks: list, mode: str) -> list:
    """One decoder of the chain on a list of token strings. ``mode``: "hf" (invalid byte runs
    become U+FFFD per byte) or "raw" (they stay bytes, as lone surrogates: surrogateescape)."""
    kind = spec["type"]
    if kind == "Sequence":
        for sub in spec.get("decoders", []):
            toks = run_chain(sub, toks, mode)
        return toks
    if kind == "Replace":
        a = spec["pattern"]["String"]
        return [t.replace(a, spec["content"]) for t in toks] if a else toks
    if kind == "Fuse":
        return ["".join(toks)]
    if kind == "Strip":
        c, start, stop = spec["content"], spec.get("start", 0), spec.get("stop", 0)
        out = []
        for t in toks:
            a = 0
            while a < min(start, len(t)) and t[a] == c:
                a += 1
            b = len(t)
            while len(t) - b < stop and b > a and t[b - 1] == c:
                b -= 1
            out.append(t[a:b])
        return out
    if kind == "ByteFallback":
        return _byte_fallback(toks, mode)
    if kind == "Metaspace":
        rep = spec.get("replacement", "\u2581")
        scheme = spec.get("prepend_scheme", "always")
        if spec.get("add_prefix_space") is False:
            scheme = "never"
        # every replacement character of the *first* token is dropped (HF 0.23)
        return [t.replace(rep, "" if i == 0 and scheme != "never" else " ")
                for i, t in enumerate(toks)]
    if kind == "WordPiece":
        return [wordpiece_join(toks, spec.get("prefix", "##"), spec.get("cleanup", True))]
    raise ValueError(f"decoder {kind!r} is not supported")


def _byte_fallback(toks: list, mode: str) -> list:
    out: list = []
    run = bytearray()

    def flush():
        if run:
            try:
                out.append(run.decode("utf-8"))
            except UnicodeDecodeError:
                if mode == "hf":
                    out.extend("\ufffd" for _ in run)
                else:
                    out.append(run.decode("utf-8", "surrogateescape"))
            run.clear()

    for t in toks:
        b = _byte_token(t)
        if b is None:
            flush()
            out.append(t)
        else:
            run.append(b)
    flush()
    return out


_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
            (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"),
            (" 're", "'re"))


def wordpiece_join(toks: list, prefix: str = "##", cleanup: bool = True) -> str:
    """HF's WordPiece decoder: a ``prefix`` token glues to the previous one, the others get a
    space; ``cleanup`` undoes BERT's spacing of punctuation and English contractions (per
    token, as HF applies it).

    >>> wordpiece_join(["un", "##aff", "##able", "!"])
    'unaffable!'
    """
    out = []
    for i, t in enumerate(toks):
        if i:
            t = t[len(prefix):] if t.startswith(prefix) else " " + t
        if cleanup:
            for a, b in _CLEANUP:
                t = t.replace(a, b)
        out.append(t)
    return "".join(out)


class SpmStreamDecoder:
    """``Encoding.stream_decoder`` of a SentencePiece ``.model``: the concatenation of every
    ``feed`` and the last ``flush`` is ``decode(all ids)``, and each call costs its own ids
    only. A character is returned as soon as its bytes are complete (a byte piece that cannot
    start or continue one becomes its U+FFFD as soon as that is known): the pieces' bytes go
    through Python's incremental UTF-8 decoder, with ``decode``'s one U+FFFD per byte that
    starts no character, a control piece ending a run of byte pieces as in ``decode``; the
    leading spaces sentencepiece drops are decided as the ids come (``_stripped``'s walk,
    one step per id).

    >>> from gputok.components.segmenters.spm_bpe import BYTE, NORMAL, UNKNOWN_T, SpmFamily
    >>> pieces = ["<unk>", "▁a"] + [f"<0x{b:02X}>" for b in range(256)]  # "é": 2 + 0xC3, 2 + 0xA9
    >>> fam = SpmFamily(pieces, [0.0] * 258, [UNKNOWN_T, NORMAL] + [BYTE] * 256,
    ...                 byte_fallback=True, unk_surface=" ⁇ ", where="doc", decode_strip=True,
    ...                 decode_all_ws=False)
    >>> dec = SpmStreamDecoder(SpmDecoder(fam))
    >>> dec.feed([1, 2 + 0xC3]), dec.feed([2 + 0xA9]), dec.flush()
    ('a', 'é', '')
    """

    def __init__(self, detok: SpmDecoder, errors: str = "replace"):
        self.d, self.errors = detok, errors
        self._codec = codecs.getincrementaldecoder("utf-8")(
            _PER_BYTE if errors == "replace" else errors)
        self._reset_walk()

    def _reset_walk(self) -> None:
        self._walking = self.d.strip
        self._pending = self._seen_ws = self._nonempty = False

    def _strip(self, i: int) -> bool:
        """One step of ``SpmDecoder._stripped``'s walk: does id ``i`` lose its leading space."""
        d = self.d
        t = d.types[i]
        if t == d.byte:
            self._pending = True
            return False
        if self._pending:
            self._nonempty, self._pending = True, False
        if self._seen_ws or self._nonempty:
            self._walking = False
            return False
        if t == d.control:
            return False
        if t == d.unknown or i == d.unk_id:
            self._nonempty = d.surface
            return False
        if d.lead[i]:
            self._seen_ws = not d.all_ws
            self._nonempty = len(d.parts[i]) > 1
            return True
        self._nonempty = bool(d.parts[i])
        return False

    def feed(self, tokens) -> str:
        d, codec = self.d, self._codec
        ids = _ids(tokens, d.n_vocab)
        out = []
        parts, control = d.parts, d.control
        per_run = self.errors == "replace"
        for i in ids:
            p = parts[i]
            if self._walking and self._strip(i):
                p = p[1:]
            if per_run and d.types[i] == control:  # a control piece ends a run of bytes
                out.append(codec.decode(b"", final=True))
                codec.reset()
            elif p:
                out.append(codec.decode(p))
        return "".join(out)

    def flush(self) -> str:
        """The bytes held back (a character not complete yet: one U+FFFD per byte), and a
        reset for a new stream."""
        text = self._codec.decode(b"", final=True)
        self._codec.reset()
        self._reset_walk()
        return text

    @property
    def pending(self) -> bytes:
        """The held-back bytes of an incomplete character (0 to 3)."""
        return self._codec.getstate()[0]


class FamilyStreamDecoder:
    """``Encoding.stream_decoder`` for families with a decoder: every ``feed`` returns the new
    text of ``decode(all ids so far)``, holding back a trailing run of byte tokens (it may still
    become a character). Each call re-decodes the ids so far (O(length) per call: fine for
    generation, where the leading-space and byte-run rules need the context)."""

    def __init__(self, detok, is_byte, errors: str = "replace"):
        self.detok, self.is_byte, self.errors = detok, is_byte, errors
        self.ids: list = []
        self.out = 0  # characters of decode(self.ids[:done]) already returned
        self.done = 0

    def feed(self, tokens) -> str:
        self.ids.extend(as_int_list(list(tokens)) if not isinstance(tokens, list) else tokens)
        stable = len(self.ids)
        while stable > self.done and self.is_byte(self.ids[stable - 1]):
            stable -= 1
        return self._emit(stable)

    def _emit(self, upto: int) -> str:
        text = self.detok.decode(self.ids[:upto], self.errors)
        new = text[self.out:]
        self.out = len(text)
        self.done = upto
        return new

    def flush(self) -> str:
        new = self._emit(len(self.ids))
        self.ids, self.out, self.done = [], 0, 0
        return new
