"""SentencePiece BPE (``.model`` files, ``tokenizer.ggml.model = llama``): the segmenter.

``cpu_ref/spm.py`` is the spec (checked against sentencepiece); the model is composed of

    split       control pieces are the special tokens (allowed explicitly; sentencepiece itself
                never produces them from text)
    normaliser  ``normalizers.SpmNormalizer``: each segment is one sentence (dummy prefix
                included); pre-tokenizer ``Whole``: the sentence is one word
    units       exact cuts (``charbpe.CharBpe.segment``) + every user-defined match is a span
    segment     ``CharBpe.merge``: symbols per character, the pair table with priority = dense
                rank of the piece's score (``score_ranks``), spans cached like pieces
    finish      symbols no piece covers become byte pieces (byte fallback) or the unk id, and a
                run of unk ids is one (runs fuse across span cuts)

Device form: ``charbpe.CHUNK_DEVICE``, a whole chunk on the device (kernels/encode_spm.cu:
the cuts, the merge over these symbols and tables, byte fallback / unk runs, and the normaliser;
``stages/spm_tables.py`` says what the device takes and why not, e.g. a sentence-wide model).

Two rules make the cuts exact. A user-defined match is frozen (never merged), and nothing
unfrozen ever spells a user-defined piece (the symbol scan would have matched it), so pairs
that involve one are left out of the table and each match is a span of its own. And an UNUSED
piece is split back after merging by a map written when a candidate pair is *proposed*, one map
for the whole sentence (``cpu_ref.spm.encode_normalized``): a model whose UNUSED pieces can
be merge results is encoded a sentence at a time (``encode_sentence``, sentencepiece's agenda
on ids; O(n log n)). No real model we know has one; crafted ones are in the tests.

Oracle quirks kept (found by experiment, see cpu_ref): -0.0 ranks below +0.0 (the comparator
is on float bit patterns); a NUL piece is skipped (conversion scripts add one next to
<0x00>); a single character that spells a CONTROL/BYTE/UNUSED piece is unknown.

Load and first use: the pieces stay arrays (``pieces.PieceTable``); a load checks them with
array passes (empty or NUL pieces, duplicates by hash, the byte pieces by shape) and makes the
few dicts the contract needs (control and user-defined pieces); the encode tables above
(``spm_build``), the piece -> id dict and the decoders' tables are made when first needed. A
262K-piece model loads in ~35 ms here (sentencepiece: ~65 ms); its tables build in ~0.3 s once
per machine (the dict walk they replace took 3 s per load) and map from the cache in ~2 ms.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Mapping

import numpy as np

from ...stages import counters
from .charbpe import CHUNK_DEVICE, CP_MASK, UNKNOWN, CharBpe, code_points
from . import Base, spm_build
from .pieces import PieceTable, duplicates

NORMAL, UNKNOWN_T, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
TYPE_NAMES = {NORMAL: "NORMAL", UNKNOWN_T: "UNKNOWN", CONTROL: "CONTROL",
              USER_DEFINED: "USER_DEFINED", UNUSED: "UNUSED", BYTE: "BYTE"}
MAX_RESEGMENT_DEPTH = 100


def score_ranks(scores) -> np.ndarray:
    """THE COMPARATOR (SentencePiece BPE): merge priority of each piece, the dense rank of its
    score, 0 for the highest. sentencepiece compares float32 *bit patterns*: float order, except
    that -0.0 is below +0.0. Equal scores share a rank (true ties, broken leftmost).

    >>> score_ranks([-1.0, -1e9, 0.0, -1.0, -0.0]).tolist()
    [2, 3, 0, 2, 1]
    """
    bits = np.asarray(scores, np.float32).view(np.uint32).astype(np.int64)
    key = np.where(bits < 0x80000000, bits & 0x7FFFFFFF, -(bits & 0x7FFFFFFF) - 1)
    _, rank = np.unique(-key, return_inverse=True)
    return rank.reshape(-1)


def byte_piece(b: int) -> str:
    return f"<0x{b:02X}>"


class SpmFamily(Base):
    """The tables of one SentencePiece BPE model (see the module docstring). ``pieces``: a
    ``PieceTable`` (``scores`` and ``types`` then None), or the pieces, scores and types as
    lists. What a load checks is found here with array passes; the encode tables
    (``spm_build``) are built, or mapped from the cache, when a text first needs them."""

    name = "SentencePiece BPE"
    cuts = True
    device = CHUNK_DEVICE  # (see the module docstring)

    def __init__(self, pieces, scores=None, types=None, *, byte_fallback: bool,
                 unk_surface: str, where: str, decode_strip: bool, decode_all_ws: bool):
        table = pieces if isinstance(pieces, PieceTable) else \
            PieceTable.from_lists(pieces, scores, types)
        self.where = where
        self.table = table
        n = self.n_vocab = len(table)
        self.byte_fallback = byte_fallback
        self.unk_surface = unk_surface
        self.decode_strip, self.decode_all_ws = decode_strip, decode_all_ws
        self.fuse_unk = not byte_fallback
        t = table.types.copy()
        off, blob = table.offsets, np.frombuffer(table.blob, np.uint8)
        blen = np.diff(off)
        # a NUL piece is skipped (sentencepiece does): UNUSED, and not a piece at all
        nul_piece = (blen == 1) & (blob[np.minimum(off[:-1], max(len(blob) - 1, 0))] == 0) \
            if len(blob) else np.zeros(n, bool)
        skip = nul_piece & ((t == UNUSED) | byte_fallback)
        t[skip] = UNUSED
        self.type_codes = t
        self.in_pid = ~skip
        self._check(skip, blen)
        unk = np.flatnonzero(t == UNKNOWN_T)
        if len(unk) > 1:
            raise ValueError(f"{where}: more than one UNKNOWN piece (ids {unk.tolist()})")
        self.unk_id = int(unk[0]) if len(unk) else -1
        if self.unk_id < 0 and not byte_fallback:
            raise ValueError(f"{where}: no UNKNOWN piece and no byte fallback")
        self.byte_ids = np.full(256, max(self.unk_id, 0), np.uint32)
        if byte_fallback:
            found = self._byte_pieces()
            missing = [b for b in range(256) if b not in found]
            if missing:
                raise ValueError(f"{where}: byte_fallback is set but {len(missing)} byte pieces "
                                 f"are missing (first: {byte_piece(missing[0])})")
            self.byte_ids[:] = [found[b] for b in range(256)]
        self.byte_id_list = self.byte_ids.tolist()
        self.specials = self._texts_of(np.flatnonzero(t == CONTROL))
        self.user_defined = self._texts_of(np.flatnonzero((t == USER_DEFINED) & ~skip))

    def _check(self, skip: np.ndarray, blen: np.ndarray) -> None:
        """The first piece (in id order) that is empty, holds a NUL, repeats an earlier one or
        is a byte piece without byte fallback raises, as a walk in id order would."""
        table, where = self.table, self.where
        bad = ~skip & (blen == 0)
        nul = np.flatnonzero(np.frombuffer(table.blob, np.uint8) == 0)
        if len(nul):
            bad[np.searchsorted(table.offsets, nul, "right") - 1] = True
        bad &= ~skip
        first_equal = duplicates(table, np.flatnonzero(~skip))
        twice = first_equal >= 0
        byte_off = (self.type_codes == BYTE) & ~skip & (not self.byte_fallback)
        worst = np.flatnonzero(bad | twice | byte_off)
        if not len(worst):
            return
        i = int(worst[0])
        if bad[i]:
            raise ValueError(f"{where}: piece {i} is empty or contains NUL")
        p = table.text(i)
        if twice[i]:
            raise ValueError(f"{where}: piece {p!r} is defined twice (ids "
                             f"{int(first_equal[i])} and {i})")
        raise ValueError(f"{where}: byte piece {p!r} but byte_fallback is off")

    def _byte_pieces(self) -> dict:
        """byte -> id of the pieces spelled "<0xXX>" (by text, whatever their type)."""
        table = self.table
        cand = np.flatnonzero(self.in_pid & (np.diff(table.offsets) == 6)
                              & table.starts_with(b"<0x"))
        out: dict = {}
        for i in cand.tolist():
            p = table.text(i)
            if p.endswith(">"):
                try:
                    b = int(p[3:5], 16)
                except ValueError:
                    continue
                if p == byte_piece(b):
                    out.setdefault(b, i)
        return out

    def _texts_of(self, ids: np.ndarray) -> dict:
        return {self.table.text(i): i for i in ids.tolist()}

    # ---- tables --------------------------------------------------------------------------------

    @functools.cached_property
    def _t(self) -> dict:
        """The encode tables (``spm_build``), built or mapped on first use."""
        return spm_build.tables(self.table, self.type_codes, self.in_pid,
                                lambda: score_ranks(self.table.scores))

    @functools.cached_property
    def bpe(self) -> CharBpe:
        return spm_build.char_bpe(self._t)

    @property
    def emittable(self) -> np.ndarray:
        return self._t["emittable"]

    @property
    def sentence_wide(self) -> bool:
        return self._t["sentence_wide"]

    @property
    def extra_cps(self) -> np.ndarray:
        """The code points of the extra symbols (``extra_chars``)."""
        return self._t["extra_cps"]

    @functools.cached_property
    def extra_chars(self) -> list:
        """Characters inside pieces that are not pieces themselves (symbols n, n + 1, ...)."""
        return [chr(c) for c in self._t["extra_cps"].tolist()]

    @functools.cached_property
    def unused_ids(self) -> frozenset:
        return frozenset(np.flatnonzero(self.in_pid & (self.type_codes == UNUSED)).tolist())

    @functools.cached_property
    def ud_regex(self):
        """The user-defined pieces, longest first, as one regex (None: none)."""
        ud = sorted(self.user_defined, key=lambda u: (-len(u), u))
        return re.compile("|".join(map(re.escape, ud))) if ud else None

    @functools.cached_property
    def pieces(self) -> list:
        """Every piece as a str (built on first use: decoders, tests)."""
        return self.table.texts

    @functools.cached_property
    def types(self) -> list:
        """Every piece's type as an int (the NUL piece sentencepiece skips: UNUSED)."""
        return self.type_codes.tolist()

    @functools.cached_property
    def piece_to_id(self) -> dict:
        """piece -> id of every piece (built on first use)."""
        return {p: i for i, p in enumerate(self.pieces) if self.in_pid[i]}

    # ---- stages --------------------------------------------------------------------------------

    def units(self, words: list) -> list:
        """Per segment, its spans: each normalised sentence (a ``Whole`` word) cut exactly."""
        sentences = [w for ws in words for w in ws]
        if self.sentence_wide:
            counters["spm.sentences"] += len(sentences)
            return words
        extra = None
        ud = self.ud_regex
        if ud is not None:
            extra = []
            for s in sentences:
                cuts = []
                for m in ud.finditer(s):
                    cuts += (m.start(), m.end())
                extra.append(cuts)
        spans = iter(self.bpe.segment(sentences, extra))
        return [[u for w in ws for u in next(spans)] for ws in words]

    def segment(self, spans: list) -> list:
        """The ids (tuples) of distinct spans (sentences for sentence-wide models)."""
        if self.sentence_wide:
            return [tuple(self.encode_sentence(s)) for s in spans]
        out: list = [None] * len(spans)
        todo = []
        ud = self.user_defined
        for i, s in enumerate(spans):
            j = ud.get(s)
            if j is None:
                todo.append(i)
            else:
                out[i] = (j,)
        ids, off = self.bpe.merge_arrays([spans[i] for i in todo])
        # symbols no piece covers (unknown characters, extra ones, single characters that spell
        # a CONTROL/BYTE/UNUSED piece) are expanded; the rest are ids as they are
        ok = self.emittable
        bad = ids >= len(ok)
        bad[~bad] = ~ok[ids[~bad]]
        bad_span = np.zeros(len(todo), bool)
        if bad.any():
            bad_span[np.searchsorted(off, np.flatnonzero(bad), "right") - 1] = True
        ids_l, off_l, bs = ids.tolist(), off.tolist(), bad_span.tolist()
        for k, i in enumerate(todo):
            f = ids_l[off_l[k]:off_l[k + 1]]
            out[i] = tuple(self._expand(f) if bs[k] else f)
        return out

    def _text(self, s: int) -> str:
        if s >= UNKNOWN:
            return chr(s & CP_MASK)
        if s >= self.n_vocab:
            return self.extra_chars[s - self.n_vocab]
        return self.table.text(s)

    def _unknown(self, s: int, out: list) -> None:
        if self.byte_fallback:
            bid = self.byte_id_list
            out.extend(bid[b] for b in self._text(s).encode("utf-8"))
        else:
            out.append(self.unk_id)

    def _expand(self, syms) -> list:
        out: list = []
        ok = self.emittable
        for s in syms:
            if s < len(ok) and ok[s]:
                out.append(s)
            else:
                self._unknown(s, out)
        return out

    def finish(self, ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The emit stage's last step: a run of unk ids within a document is one (sentences
        are separated by special tokens, so a run never crosses one)."""
        if not self.fuse_unk or not len(ids):
            return ids, offsets
        unk = ids == self.unk_id
        drop = np.zeros(len(ids), bool)
        drop[1:] = unk[1:] & unk[:-1]
        if not drop.any():
            return ids, offsets
        drop[offsets[:-1][offsets[:-1] < len(ids)]] = False  # never across documents
        keep = ~drop
        kept_before = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(keep, out=kept_before[1:])
        return ids[keep], kept_before[offsets]

    def finish_list(self, ids: list) -> list:
        """``finish`` for one document as a list."""
        if not self.fuse_unk or self.unk_id not in ids:
            return ids
        unk = self.unk_id
        return [x for k, x in enumerate(ids) if not (x == unk and k and ids[k - 1] == unk)]

    def token_id(self, text: str) -> "int | None":
        """The id of a piece as the vocabulary spells it ("▁the")."""
        return self.piece_to_id.get(text)

    # ---- one sentence, sentencepiece's agenda (models with UNUSED merge results) --------------

    def symbols_of(self, sentence: str) -> list:
        """Initial symbols: user-defined matches (frozen: no pair of the table has them), else
        one per character."""
        syms = self.bpe.sym_of[code_points(sentence)].tolist()
        ud = self.ud_regex
        if ud is None:
            return syms
        out, pos = [], 0
        for m in ud.finditer(sentence):
            out += syms[pos:m.start()]
            out.append(self.user_defined[m.group()])
            pos = m.end()
        return out + syms[pos:]

    def encode_sentence(self, sentence: str) -> list:
        """``cpu_ref.spm.RefSentencePiece.encode_normalized`` + emit, on symbol ids: the agenda
        (heap of proposed pairs, stale entries skipped) records which pair proposed each UNUSED
        piece, in proposal order, for the whole sentence; UNUSED results are split back by it."""
        syms = self.symbols_of(sentence)
        n = len(syms)
        get = self.bpe.table.pairs.get
        unused = self.unused_ids
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n - 1))
        alive = [True] * n
        heap: list = []
        rev: dict = {}

        def propose(i: int, j: int) -> None:
            if i < 0 or j >= n:
                return
            v = get(syms[i] << 32 | syms[j])
            if v is None:
                return
            # THE COMPARATOR: best rank first, then the leftmost pair
            heapq.heappush(heap, (v[0], i, j, syms[i], syms[j]))
            if v[1] in unused:
                rev[v[1]] = (syms[i], syms[j])

        for i in range(n - 1):
            propose(i, i + 1)
        while heap:
            _, i, j, a, b = heapq.heappop(heap)
            if not (alive[i] and alive[j] and nxt[i] == j and syms[i] == a and syms[j] == b):
                continue
            syms[i] = get(a << 32 | b)[1]
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prv[nxt[j]] = i
            propose(prv[i], i)
            propose(i, nxt[i])
        out: list = []
        i = 0
        while i < n:
            self._resegment(syms[i], rev, out, 0)
            i = nxt[i]
        counters["spm.agenda"] += 1
        return out

    def _resegment(self, s: int, rev: dict, out: list, depth: int) -> None:
        is_piece = s < self.n_vocab and bool(self.in_pid[s])
        t = self.types[s] if is_piece else None
        if depth > MAX_RESEGMENT_DEPTH:
            out.append(s) if is_piece and s != self.unk_id else self._unknown(s, out)
        elif t not in (NORMAL, USER_DEFINED, UNUSED):
            self._unknown(s, out)
        elif t != UNUSED:
            out.append(s)
        elif s in rev:
            a, b = rev[s]
            self._resegment(a, rev, out, depth + 1)
            self._resegment(b, rev, out, depth + 1)
        else:
            self._unknown(s, out)  # an UNUSED single character is unknown


def decoder_map(fam, table: "PieceTable | None" = None, types=None) -> "TokenBytes":
    """id -> bytes of each piece, as ``decode_single_token_bytes`` shows it: "▁" as a space, a
    byte piece as its byte, unk as the unk surface, a control piece as its text. ``table``,
    ``types``: the family's pieces and their (effective) types, where it is not an
    ``SpmFamily``."""
    if table is None:
        table, types = fam.table, fam.type_codes
    return TokenBytes(table, np.asarray(types, np.uint8), fam.unk_surface, fam.byte_fallback)


class TokenBytes(Mapping):
    """``decoder_map``'s mapping, each id's bytes made when asked (a load builds no dict of n
    entries); ``items()`` and the like make them all once."""

    def __init__(self, table: PieceTable, types: np.ndarray, unk_surface: str,
                 byte_fallback: bool):
        self.table, self.types = table, types
        self.unk_surface, self.byte_fallback = unk_surface, byte_fallback
        self.n = len(table)

    def __getitem__(self, i):
        if not isinstance(i, (int, np.integer)) or not 0 <= i < self.n:
            raise KeyError(i)
        i = int(i)
        t = int(self.types[i])
        if t == UNKNOWN_T:
            return self.unk_surface.encode("utf-8")
        if t == BYTE and self.byte_fallback:
            p = self.table.text(i)
            if len(p) == 6 and p.startswith("<0x"):
                return bytes([int(p[3:5], 16)])
        if t == CONTROL or t == BYTE:
            return self.table.text(i).encode("utf-8")
        blob, off = self.table.spaced
        return blob[off[i]:off[i + 1]]

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(range(self.n))

    def __contains__(self, i) -> bool:
        return isinstance(i, (int, np.integer)) and 0 <= i < self.n

    def max_key(self) -> int:
        return self.n - 1

    def items(self):
        return self._all.items()

    def values(self):
        return self._all.values()

    @functools.cached_property
    def _all(self) -> dict:
        blob, off = self.table.spaced
        ol = off.tolist()
        out = dict(enumerate(blob[a:b] for a, b in zip(ol, ol[1:])))
        t = self.types
        for i in np.flatnonzero((t == UNKNOWN_T) | (t == BYTE) | (t == CONTROL)).tolist():
            out[i] = self[i]
        return out
