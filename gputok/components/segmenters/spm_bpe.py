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
"""

from __future__ import annotations

import heapq
import re

import numpy as np

from ...stages import counters
from .charbpe import CHUNK_DEVICE, CP_MASK, UNKNOWN, CharBpe, code_points
from ..normalizers.spm import SPACE
from . import Base

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
    """The tables of one SentencePiece BPE model (see the module docstring)."""

    name = "SentencePiece BPE"
    cuts = True
    device = CHUNK_DEVICE  # (see the module docstring)

    def __init__(self, pieces, scores, types, *, byte_fallback: bool, unk_surface: str,
                 where: str, decode_strip: bool, decode_all_ws: bool):
        self.where = where
        self.pieces = list(pieces)
        self.types = list(types)
        n = self.n_vocab = len(self.pieces)
        self.byte_fallback = byte_fallback
        self.piece_to_id: dict[str, int] = {}
        for i, (p, t) in enumerate(zip(self.pieces, self.types)):
            if p == "\0" and (t == UNUSED or byte_fallback):
                self.types[i] = UNUSED  # sentencepiece skips it
                continue
            if not p or "\0" in p:
                raise ValueError(f"{where}: piece {i} is empty or contains NUL")
            if p in self.piece_to_id:
                raise ValueError(f"{where}: piece {p!r} is defined twice (ids "
                                 f"{self.piece_to_id[p]} and {i})")
            if t == BYTE and not byte_fallback:
                raise ValueError(f"{where}: byte piece {p!r} but byte_fallback is off")
            self.piece_to_id[p] = i
        unk = [i for i, t in enumerate(self.types) if t == UNKNOWN_T]
        if len(unk) > 1:
            raise ValueError(f"{where}: more than one UNKNOWN piece (ids {unk})")
        self.unk_id = unk[0] if unk else -1
        if self.unk_id < 0 and not byte_fallback:
            raise ValueError(f"{where}: no UNKNOWN piece and no byte fallback")
        self.byte_ids = np.full(256, max(self.unk_id, 0), np.uint32)
        if byte_fallback:
            missing = [b for b in range(256) if byte_piece(b) not in self.piece_to_id]
            if missing:
                raise ValueError(f"{where}: byte_fallback is set but {len(missing)} byte pieces "
                                 f"are missing (first: {byte_piece(missing[0])})")
            self.byte_ids[:] = [self.piece_to_id[byte_piece(b)] for b in range(256)]
        self.byte_id_list = self.byte_ids.tolist()
        self.unk_surface = unk_surface
        self.decode_strip, self.decode_all_ws = decode_strip, decode_all_ws
        self.specials = {p: i for i, (p, t) in enumerate(zip(self.pieces, self.types))
                         if t == CONTROL}
        self.user_defined = {p: i for i, (p, t) in enumerate(zip(self.pieces, self.types))
                             if t == USER_DEFINED and self.piece_to_id.get(p) == i}
        ud = sorted(self.user_defined, key=lambda u: (-len(u), u))  # longest first
        self.ud_regex = re.compile("|".join(map(re.escape, ud))) if ud else None
        self.fuse_unk = not byte_fallback
        self._build_bpe(score_ranks(scores) if n else np.zeros(0, np.int64))

    # ---- tables --------------------------------------------------------------------------------

    def _build_bpe(self, rank: np.ndarray) -> None:
        pid, types = self.piece_to_id, self.types
        mergeable = (NORMAL, USER_DEFINED, UNUSED)
        # merge results: NORMAL and UNUSED pieces (a user-defined piece is never one, see above)
        results = [(p, i) for p, i in pid.items() if len(p) > 1 and types[i] in (NORMAL, UNUSED)]
        extra: dict[str, int] = {}  # characters inside pieces that are not pieces themselves
        for p, _ in results:
            for c in p:
                if c not in pid and c not in extra:
                    extra[c] = self.n_vocab + len(extra)
        self.extra_chars = list(extra)
        char_syms = {p: i for p, i in pid.items() if len(p) == 1}
        char_syms.update(extra)
        frozen = set(self.user_defined.values())
        # every text a symbol can have: a character (not a frozen one), or a merge result
        sym_of_text = {c: i for c, i in char_syms.items() if i not in frozen}
        sym_of_text.update(results)
        get = sym_of_text.get
        pairs: dict[int, tuple[int, int]] = {}
        rank_l = rank.tolist()
        merged_unused = False
        for p, i in results:
            r = (rank_l[i], i)
            for k in range(1, len(p)):
                a = get(p[:k])
                if a is not None:
                    b = get(p[k:])
                    if b is not None:
                        pairs[a << 32 | b] = r
                        merged_unused |= types[i] == UNUSED
        inner = {(a, b) for p, i in pid.items() if types[i] in mergeable for a, b in zip(p, p[1:])}
        self.bpe = CharBpe(char_syms, pairs, inner)
        # final symbols emitted as they are: NORMAL and USER_DEFINED pieces
        self.emittable = np.zeros(self.n_vocab + len(extra), bool)
        for p, i in pid.items():
            self.emittable[i] = types[i] in (NORMAL, USER_DEFINED)
        self.unused_ids = frozenset(i for p, i in pid.items() if types[i] == UNUSED)
        self.sentence_wide = merged_unused

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
        return self.pieces[s]

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
        is_piece = s < self.n_vocab and self.pieces[s] in self.piece_to_id
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


def decoder_map(fam: SpmFamily) -> dict:
    """id -> bytes of each piece, as ``decode_single_token_bytes`` shows it: "▁" as a space, a
    byte piece as its byte, unk as the unk surface, a control piece as its text."""
    out = {}
    for i, (p, t) in enumerate(zip(fam.pieces, fam.types)):
        if t == BYTE and fam.byte_fallback and len(p) == 6 and p.startswith("<0x"):
            out[i] = bytes([int(p[3:5], 16)])
        elif t == UNKNOWN_T:
            out[i] = fam.unk_surface.encode("utf-8")
        elif t == CONTROL:
            out[i] = p.encode("utf-8")
        else:
            out[i] = p.replace(SPACE, " ").encode("utf-8")
    return out
