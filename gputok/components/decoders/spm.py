"""sentencepiece's decoding of a ``.model`` (``SpmDecoder``), one text, a batch, or a stream.

``Encoding.decode`` equals sentencepiece's ``decode`` exactly: control pieces vanish, unk is the
unk surface (" \\u2047 "), "▁" is a space, the dummy prefix's "▁" is dropped from the first piece
(every leading "▁" piece with ``remove_extra_whitespaces``), and a run of byte pieces that is not
valid UTF-8 gives one U+FFFD *per byte* that does not start a valid character (Python's
``errors="replace"`` would merge a truncated sequence into one).

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
from ...stages.join import JoinTable
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
        raw = parts if len(ids) == 1 else b"".join(parts)
        if self.nul is not None and b"\x00" in raw and self.nul in ids:
            return None
        return self._text_of(raw, ids)

    def _text_of(self, raw, ids: list) -> str:
        """The text of ``marked`` pieces joined (``raw``) for ``ids`` (no NUL byte piece among
        them): one U+FFFD per byte that starts no character, the control pieces' NULs gone,
        the leading spaces sentencepiece drops dropped."""
        text = raw.decode("utf-8", _PER_BYTE)
        if "\x00" in text:
            text = text.replace("\x00", "")
        return text[len(self._stripped(ids)):] if self.strip else text

    @functools.cached_property
    def joined(self) -> JoinTable:
        """``marked`` laid out for the native batch join; the ids ``decode`` takes its per-run
        path for (``odd``, the NUL byte piece) are marked."""
        mark = np.zeros(self.n_vocab, np.uint8)
        mark[sorted(self.odd)] = 1
        if self.nul is not None:
            mark[self.nul] = 1
        return JoinTable(self.marked, mark)

    def decode_batch(self, batch, errors: str = "replace", joiner=None) -> list:
        """``[decode(ids) for ids in batch]``; with ``joiner`` (``stages.join.PieceJoin``) the
        whole batch's pieces are looked up and joined in one native call, and each document is
        then ``_text_of`` its bytes (a document holding a marked id takes
        ``decode``)."""
        got = joiner(batch, self.joined) if joiner is not None and errors == "replace" else None
        if got is None:
            return [self.decode(t, errors) for t in batch]
        buf, ends, marked = got
        text_of = self._text_of
        out = [text_of(buf[ends[d]:ends[d + 1]], ids) for d, ids in enumerate(batch)]
        for d in marked:
            out[d] = self.decode(batch[d], errors)
        return out

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
