"""Unigram (SentencePiece ``model_type: UNIGRAM`` and HF ``Unigram``): the segmenter.

``cpu_ref/unigram.py`` is the spec: the best path through the lattice of pieces, on UTF-8 byte
positions, each oracle with its own arithmetic and tie rule. gputok computes the same walk for a
batch of units at once (``viterbi``):

1. candidate edges: every piece that is a prefix of the text at every character start, found by
   walking a byte trie (``trie.ByteTrie``) for all starts together, one byte per numpy step;
   a start with no one-character piece gets an unknown edge;
2. the lattice, in lockstep over the units: step ``k`` relaxes the edges that leave the ``k``-th
   character of every unit. Edges of one step never share an end, and a step follows every edge
   from an earlier start, so "a candidate replaces the best only when strictly greater" keeps the
   oracle's order (THE COMPARATOR, see cpu_ref): earlier start first, then shorter piece;
3. the path read back, then each oracle's last rule (byte fallback, unk runs).

Units are what each oracle runs the lattice on: sentencepiece the whole normalised sentence
(pre-tokenizer ``Whole``), HF each pre-tokenized word. Sentences are never cut into spans the way
BPE's are: sentencepiece sums scores in float32 from the sentence start, and a sum restarted at a
cut rounds differently (a near-tie can flip).

Performance notes: the lockstep costs ~20 numpy calls per character of the longest unit in the
batch, so a batch of words (HF) is cheap and a batch of long sentences is not (a 4K-character
document ~0.1 s).

Device form (``device``, stage "lattice"): the native CPU's lattice (``kernels/host_unigram.h``,
``backends/runners/unigram.py``), one unit at a time on each thread, from the arrays
``lattice_tables`` gives (the candidate pieces' trie is built there); GPUs have none and run
the model on the host, counted.
"""

from __future__ import annotations

import array
import functools

import numpy as np

from ...stages import counters
from .. import SegmenterDevice
from . import Base
from .trie import ByteTrie

NORMAL, UNKNOWN_T, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
FLT_MAX = np.float32(3.4028234663852886e38)
UNK_PENALTY = 10.0
SCORE_RESET = np.float32(100000.0)
LOCKSTEP_MIN = 8  # units sharing a step below which each runs on alone (``_one_unit``)
NO_ID = 0xFFFFFFFF  # (lattice_tables: no unk id, no byte piece)


class _Lattice(Base):
    """The shared walk; a subclass sets ``trie``, ``unk_id`` and the rule's arithmetic."""

    name = "Unigram"
    float32 = False  # sentencepiece: scores and sums in float32; HF: float64

    def edge_scores(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def candidates(self) -> dict:
        raise NotImplementedError

    def byte_table(self) -> np.ndarray:
        """uint32[256]: the id each byte becomes under byte fallback (``NO_ID``: none)."""
        raise NotImplementedError

    @functools.cached_property
    def device(self) -> SegmenterDevice:
        return SegmenterDevice(stage="lattice", kernel="unigram_lattice", one_call=True,
                               tables=self.lattice_tables)

    def lattice_tables(self) -> tuple[dict, dict]:
        """What the device's lattice takes (``kernels/host_unigram.h``): arrays ``keys`` (the
        candidate pieces' UTF-8 joined), ``key_off`` (int64, one more), ``key_ids`` (int32),
        ``score`` (float64, each id's edge score), ``byte_ids``; scalars ``hf``,
        ``byte_fallback``, ``unk`` (``NO_ID``: none), ``unk_score``."""
        cand = self.candidates()
        raw = list(cand)
        off = np.zeros(len(raw) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, raw), np.int64, len(raw)), out=off[1:])
        score = self.edge_scores(np.arange(len(self.scores64)), None)
        arrays = {"keys": np.frombuffer(b"".join(raw), np.uint8), "key_off": off,
                  "key_ids": np.fromiter(cand.values(), np.int32, len(cand)),
                  "score": np.ascontiguousarray(score, np.float64),
                  "byte_ids": self.byte_table()}
        scalars = {"hf": not self.float32, "byte_fallback": bool(self.byte_fallback),
                   "unk": NO_ID if self.unk_id is None else int(self.unk_id),
                   "unk_score": float(self.unk_score)}
        return arrays, scalars

    @functools.cached_property
    def trie(self) -> ByteTrie:
        """The candidate pieces' byte trie, built on first use (not at load: ~1 s for 250K
        pieces)."""
        return ByteTrie(self.candidates())

    def viterbi(self, units: list) -> list:
        """Per unit, its best path as ``(piece start, piece end, id)`` lists (byte offsets into
        the unit's UTF-8; id ``-1``: an unknown edge)."""
        ru, rs, re_, rid, _, _ = self.paths(units)
        out: list = [[] for _ in range(len(units))]
        for uu, a, b, i in zip(ru.tolist(), rs.tolist(), re_.tolist(), rid.tolist()):
            out[uu].append((a, b, i))
        return out

    def paths(self, units: list) -> tuple:
        """The best paths of all units as arrays, in order: (unit, piece start, piece end, id)
        with byte offsets into the unit's UTF-8 (id -1: an unknown edge), and the units' joined
        UTF-8 with their offsets."""
        raw = [u.encode("utf-8") for u in units]
        n_units = len(raw)
        off = np.zeros(n_units + 1, np.int64)
        np.cumsum([len(b) for b in raw], out=off[1:])
        buf = np.frombuffer(b"".join(raw), np.uint8)
        cs = np.flatnonzero((buf & 0xC0) != 0x80)  # character starts
        unit = np.searchsorted(off, cs, "right") - 1
        limit = off[1:][unit]
        clen = np.minimum(np.append(cs[1:], len(buf)), limit) - cs
        s, e, ids = self.trie.matches(buf, cs, limit)
        ci = np.searchsorted(cs, s)
        score = self.edge_scores(ids, e - s)
        single = np.zeros(len(cs), bool)
        single[ci[(e - s) == clen[ci]]] = True
        unk = np.flatnonzero(~single)  # characters no one-character piece covers
        s = np.concatenate([s, cs[unk]])
        e = np.concatenate([e, cs[unk] + clen[unk]])
        ids = np.concatenate([ids.astype(np.int64), np.full(len(unk), -1, np.int64)])
        score = np.concatenate([score, np.full(len(unk), self.unk_score, np.float64)])
        ci = np.concatenate([ci, unk])
        u = unit[ci]
        first_char = np.searchsorted(cs, off[:-1])
        k = ci - first_char[u]  # the start's character index in its unit
        order = np.argsort(k, kind="stable")
        s, e, ids, score, u, k = s[order], e[order], ids[order], score[order], u[order], k[order]
        # positions shifted by their unit's index: a unit's end and the next one's start differ
        src, dst = s + u, e + u
        n_pos = len(buf) + n_units
        dt = np.float32 if self.float32 else np.float64
        # best sum ending at each position; -inf: none yet (no path ever sums to it)
        best = np.full(n_pos, -np.inf, dt)
        best[off[:-1] + np.arange(n_units)] = 0
        back_s = np.zeros(n_pos, np.int64)
        back_id = np.zeros(n_pos, np.int64)
        score = score.astype(dt)  # (float32: each score rounded once, as sentencepiece's)
        bounds = np.searchsorted(k, np.arange(int(k[-1]) + 2 if len(k) else 1)).tolist()
        by_unit = np.argsort(u, kind="stable")  # each unit's edges, in step order
        unit_edges = np.searchsorted(u[by_unit], np.arange(n_units + 1))

        def frontier(uu: int, before: int) -> int:
            """The furthest end of unit ``uu``'s edges before edge ``before`` (its start's
            position if none): sentencepiece's frontier, asked only when it rebases."""
            mine = by_unit[unit_edges[uu]:unit_edges[uu + 1]]
            mine = mine[:np.searchsorted(mine, before)]
            return int(dst[mine].max()) if len(mine) else int(off[uu] + uu)
        # lockstep while enough units share a step; the last few long units one by one
        chars = np.diff(np.append(first_char, len(cs)))
        n_long = np.bincount(np.minimum(chars, len(bounds) - 1), minlength=len(bounds))
        active = n_units - np.cumsum(n_long)[:-1]  # units with more than k characters
        k0 = int(np.argmax(active < LOCKSTEP_MIN)) if (active < LOCKSTEP_MIN).any() \
            else len(bounds) - 1
        for a, b in zip(bounds[:k0], bounds[1:k0 + 1]):
            d = dst[a:b]
            base = best[src[a:b]]
            if self.float32:  # (sentencepiece: sums in float32, see cpu_ref)
                big = (base < -SCORE_RESET) | (base > SCORE_RESET)
                if big.any():  # sentencepiece rebases a unit's sums from this start on
                    for p, uu in set(zip(src[a:b][big].tolist(), u[a:b][big].tolist())):
                        span = slice(p, frontier(uu, a) + 1)
                        best[span] -= best[p]
                    base = best[src[a:b]]
            cand = score[a:b] + base
            take = cand > best[d]  # THE COMPARATOR: strictly greater (or the first)
            d = d[take]
            best[d] = cand[take]
            back_s[d] = src[a:b][take]
            back_id[d] = ids[a:b][take]
        counters["unigram.steps"] += k0
        if k0 < len(bounds) - 1:
            rest = np.arange(bounds[k0], len(k))
            for uu in np.unique(u[rest]).tolist():
                mine = rest[u[rest] == uu]
                self._one_unit(int(off[uu] + uu), int(off[uu + 1] + uu), src[mine], dst[mine],
                               score[mine], ids[mine], best, back_s, back_id,
                               frontier(uu, bounds[k0]))
        # read the paths back, all units in lockstep
        start_sh = off[:-1] + np.arange(n_units)
        cur = off[1:] + np.arange(n_units)
        live = np.flatnonzero(cur > start_sh)
        rec: list = []
        while len(live):
            c = cur[live]
            rec.append((live, back_s[c], c, back_id[c]))
            cur[live] = back_s[c]
            live = live[cur[live] > start_sh[live]]
        counters["unigram.units"] += n_units
        if not rec:
            z = np.zeros(0, np.int64)
            return z, z, z, z, buf, off
        ru = np.concatenate([r[0] for r in rec])
        rs = np.concatenate([r[1] for r in rec]) - ru - off[ru]
        re_ = np.concatenate([r[2] for r in rec]) - ru - off[ru]
        rid = np.concatenate([r[3] for r in rec])
        order = np.lexsort((rs, ru))
        return ru[order], rs[order], re_[order], rid[order], buf, off

    def _one_unit(self, lo: int, hi: int, src, dst, score, ids, best, back_s, back_id,
                  frontier: int) -> None:
        """The rest of one unit's lattice (positions ``lo..hi``), edge by edge in Python:
        the same rule as a lockstep step, for a unit far longer than the others (one document of
        100K characters: ~20 numpy calls a character in lockstep, ~1 us an edge here)."""
        b = best[lo:hi + 1].tolist()
        bs = back_s[lo:hi + 1].tolist()
        bi = back_id[lo:hi + 1].tolist()
        f32 = array.array("f", [0.0])  # a store rounds to float32
        rounding = self.float32
        reset = float(SCORE_RESET)
        front = frontier - lo
        last = -1
        for s, e, sc, i in zip((src - lo).tolist(), (dst - lo).tolist(), score.tolist(),
                               ids.tolist()):
            base = b[s]
            if rounding:
                if s != last:
                    last = s
                    if not -reset <= base <= reset:  # sentencepiece's rebase (see cpu_ref)
                        for q in range(s, front + 1):
                            f32[0] = b[q] - base  # (-inf stays -inf)
                            b[q] = f32[0]
                        base = 0.0
                f32[0] = sc + base
                cand = f32[0]
                if e > front:
                    front = e
            else:
                cand = sc + base
            if cand > b[e]:  # THE COMPARATOR: strictly greater (or the first)
                b[e], bs[e], bi[e] = cand, s + lo, i
        best[lo:hi + 1] = b
        back_s[lo:hi + 1] = bs
        back_id[lo:hi + 1] = bi


class SpmUnigram(_Lattice):
    """A sentencepiece Unigram model (``.model``; see ``cpu_ref.unigram.RefUnigram``).

    >>> u = SpmUnigram(["<unk>", "▁a", "b", "▁ab"], [0.0, -1.0, -2.0, -2.5], [2, 1, 1, 1],
    ...                byte_fallback=False, where="x")
    >>> u.segment(["▁ab▁c", "▁a"])
    [(3, 0), (1,)]
    """

    float32 = True

    def __init__(self, pieces, scores, types, *, byte_fallback: bool, where: str,
                 unk_surface: str = " \u2047 ", decode_strip: bool = True,
                 decode_all_ws: bool = True):
        self.pieces, self.types = list(pieces), list(types)
        # (what the decoder reads: ``decoders.SpmDecoder``)
        self.unk_surface, self.decode_strip, self.decode_all_ws = (unk_surface, decode_strip,
                                                                   decode_all_ws)
        self.n_vocab = len(self.pieces)
        self.piece_to_id: dict = {}
        for i, (p, t) in enumerate(zip(self.pieces, self.types)):
            if not p:
                raise ValueError(f"{where}: piece {i} is empty")
            if p in self.piece_to_id:
                raise ValueError(f"{where}: piece {p!r} is defined twice (ids "
                                 f"{self.piece_to_id[p]} and {i})")
            self.piece_to_id[p] = i
        unk = [i for i, t in enumerate(self.types) if t == UNKNOWN_T]
        if len(unk) != 1:
            raise ValueError(f"{where}: a Unigram model needs exactly one UNKNOWN piece (found "
                             f"{len(unk)})")
        self.unk_id = unk[0]
        self.byte_fallback = byte_fallback
        self.byte_ids = np.full(256, self.unk_id, np.uint32)
        if byte_fallback:
            missing = [b for b in range(256) if f"<0x{b:02X}>" not in self.piece_to_id]
            if missing:
                raise ValueError(f"{where}: byte_fallback is set but {len(missing)} byte pieces "
                                 f"are missing (first: <0x{missing[0]:02X}>)")
            self.byte_ids[:] = [self.piece_to_id[f"<0x{b:02X}>"] for b in range(256)]
        sc = np.asarray(scores, np.float32)
        if not np.isfinite(sc).all():
            raise ValueError(f"{where}: a Unigram model's scores must be finite (piece "
                             f"{int(np.flatnonzero(~np.isfinite(sc))[0])})")
        normal = np.array([t == NORMAL for t in self.types], bool)
        self.min_score = sc[normal].min() if normal.any() else FLT_MAX
        self.unk_score = float(np.float32(self.min_score - np.float32(UNK_PENALTY)))
        self.scores64 = sc.astype(np.float64)
        self.is_ud = np.array([t == USER_DEFINED for t in self.types], bool)
        self.specials = {p: i for i, (p, t) in enumerate(zip(self.pieces, self.types))
                         if t == CONTROL}

    def candidates(self) -> dict:
        """NORMAL and USER_DEFINED pieces (sentencepiece skips UNUSED ones)."""
        return {p.encode("utf-8"): i for p, i in self.piece_to_id.items()
                if self.types[i] in (NORMAL, USER_DEFINED)}

    def edge_scores(self, ids: np.ndarray, lengths: "np.ndarray | None") -> np.ndarray:
        """Each edge's score (``lengths``: its bytes; None: the pieces' own, ids being all)."""
        out = self.scores64[ids]
        ud = self.is_ud[ids]
        if ud.any():  # 0.1 * (bytes - 1): a bonus over log probabilities (rounded when used)
            if lengths is None:
                lengths = np.array([len(p.encode("utf-8")) for p in self.pieces], np.int64)
            out[ud] = 0.1 * (lengths[ud] - 1)
        return out

    def byte_table(self) -> np.ndarray:
        return self.byte_ids

    def segment(self, units: list) -> list:
        """The processor's rule on the paths, vectorised: an unknown piece becomes its bytes'
        pieces (byte fallback), else a run of them in a unit is one unk id."""
        ru, rs, re_, rid, buf, off = self.paths(units)
        unk = rid < 0
        if self.byte_fallback and unk.any():
            n = np.where(unk, re_ - rs, 1)  # ids each piece becomes
            at = np.repeat(np.cumsum(n) - n, n)  # each output slot's piece's first slot
            piece = np.repeat(np.arange(len(rid)), n)
            ids = rid[piece]
            u_slot = np.flatnonzero(unk[piece])
            byte_at = off[ru[piece[u_slot]]] + rs[piece[u_slot]] + (u_slot - at[u_slot])
            ids[u_slot] = self.byte_ids[buf[byte_at]]
            unit_of = ru[piece]
        else:
            keep = ~(unk & np.concatenate([[False], unk[:-1] & (ru[1:] == ru[:-1])]))
            ids = np.where(unk, self.unk_id, rid)[keep]
            unit_of = ru[keep]
        bounds = np.searchsorted(unit_of, np.arange(len(units) + 1)).tolist()
        flat = ids.tolist()
        return [tuple(flat[a:b]) for a, b in zip(bounds, bounds[1:])]

    def token_id(self, text: str) -> "int | None":
        return self.piece_to_id.get(text)


class HFUnigram(_Lattice):
    """HF ``tokenizers``' Unigram model (see ``cpu_ref.unigram.UnigramHF``): ``vocab`` is
    ``[(token, score)]`` in id order.

    >>> u = HFUnigram([("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("ab", -1.5)], 0, False)
    >>> u.segment(["abxyb"])
    [(3, 0, 2)]
    """

    def __init__(self, vocab: list, unk_id: "int | None", byte_fallback: bool,
                 where: str = "tokenizer.json"):
        self.vocab: dict = {}
        for i, (t, _) in enumerate(vocab):
            self.vocab[t] = i  # (a repeated token: its last id)
        scores = np.array([float(s) for _, s in vocab], np.float64)
        self.scores64 = scores
        self.min_score = float(scores.min()) if len(scores) else float("inf")
        self.unk_score = self.min_score - UNK_PENALTY
        if unk_id is not None and not 0 <= unk_id < len(vocab):
            raise ValueError(f"{where}: model.unk_id {unk_id} is not an id of model.vocab")
        self.unk_id = unk_id
        self.where = where
        self.byte_fallback = byte_fallback
        self.byte_tok = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]

    def candidates(self) -> dict:
        """Every vocabulary entry (HF matches the unk token and byte tokens too)."""
        return {t.encode("utf-8"): i for t, i in self.vocab.items()}

    def edge_scores(self, ids: np.ndarray, lengths: "np.ndarray | None") -> np.ndarray:
        return self.scores64[ids]

    def byte_table(self) -> np.ndarray:
        return np.array([NO_ID if t is None else t for t in self.byte_tok], np.uint32)

    def segment(self, units: list) -> list:
        out = []
        for u, path in zip(units, self.viterbi(units)):
            data = u.encode("utf-8")
            ids: list = []
            run = None  # (start, end) of the pending fused unknown run
            for a, b, i in path:
                if i < 0 and self.unk_id is None:
                    raise ValueError(f"{self.where}: a character has no piece and the Unigram "
                                     "model has no unk_id")
                if i < 0 or i == self.unk_id:  # unknown edges (and the unk token) fuse
                    run = (a, b) if run is None else (run[0], b)
                    continue
                if run is not None:
                    self._unknown(data[run[0]:run[1]], ids)
                    run = None
                ids.append(i)
            if run is not None:
                self._unknown(data[run[0]:run[1]], ids)
            out.append(tuple(ids))
        return out

    def _unknown(self, piece: bytes, ids: list) -> None:
        i = self.vocab.get(piece.decode("utf-8"))
        if i is not None:  # a fused run that spells an entry is that entry
            ids.append(i)
            return
        if self.byte_fallback:
            toks = [self.byte_tok[x] for x in piece]
            if None not in toks:
                ids.extend(toks)
                return
        ids.append(self.unk_id)
