"""The Metal trainer's indexed merge loop: CUDA's design (``kernels/train_bpe.cu``: a pair ->
positions index, candidates under a boundary, each step touching only the merged pair's
occurrences) run by ``shaders/train_index_steps.metal``, a block of steps per launch of one
threadgroup. What the launch costs besides its steps is one copy of the state, input to output
(MLX's outputs are fresh buffers), shared by the block's steps.

The host reads the state once per launch and handles why the block stopped, as CUDA's driver
does (``gputok/backends/cuda/train.py``): candidates chosen again (THE CANDIDATE RULE), a table
twice as large, a repacked pool, larger gain buffers, HF's rule 7 answered after comparing the
bytes. Those moves, and the first count, are numpy on the host (unified memory: views, not
transfers): each is one pass over the table or the positions, and happens O(log n) times or when
the candidates run out, not per merge. A gained pair that already has a list (its merged token's
id existed: rule 7) stops the block too, and the host lists every pair's occurrences again.

Performance notes (not timed: no Apple hardware).

* Bytes a step moves, by construction: the merged pair's list entries, matches and gains (a few
  words each), the candidates (at most ``CANDIDATES``, 4 B + a count each) and a few probes of
  the ids' spellings (rule 7); plus its share of the launch's copy: about 29 B per position
  (links 12, is_start 1, the pool ~16) + 28 B per table slot + 16-24 B per id, once per
  ``BLOCK_STEPS`` steps (~0.1 B per position a step at 256). The scan loop (``train.py``)
  moves ~26 B per position + ~64 B per slot in every step.
* One threadgroup does the steps because Metal has no barrier across threadgroups; it also does
  the copy, at one GPU core's bandwidth. A wide copy launch first would not help (the steps'
  launch would still get fresh outputs), nor would threadgroups that copy while the first one
  steps (nothing orders their writes before its reads). If the copy dominates on a Mac, raise
  ``BLOCK_STEPS``: the records grow by 56 B a step, nothing else.
* Rule 7 looks the merged token up in a set of the ids' spellings (THE SPELLING PRINT) rather
  than comparing every id as the scan loop does: that was a pass over the vocabulary a step.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import train_arrays as arrays
from ..kernels import TRAIN_BLOCK
from .kernels import PAD, KernelFactory, shader_layout
from .train_reference import pair_hash

_MAX_LOAD = 0.75
BLOCK_STEPS = 256  # merge steps a launch may make (the copy of the state is shared by them)
CANDIDATES = 1 << 14  # room for candidates (each step scans those listed, one threadgroup)
TABLE_WORDS = 6  # key_hi, key_lo, c_lo, c_hi, list_len, list_off: blocks of `cap` uint32 each
REC = 7  # a step's record: a, b, c, count, occurrence work, candidates scanned, rule 7's probes


ST, STOP = shader_layout("train_index_common.metal")  # (the record's fields, the stop codes)
_pow2_at_least = arrays.pow2_at_least


def read_back(arrays_: list) -> list[np.ndarray]:
    """Wait for ``arrays_`` and view them on the host: the loop's one wait per launch (a function
    of its own so the tests can count the calls)."""
    import mlx.core as mx

    mx.eval(*arrays_)
    return [np.array(x, copy=False) for x in arrays_]


def spelling_print(lengths, hashes) -> np.ndarray:
    """THE SPELLING PRINT (``train_ix_print``, shaders/train_index_common.metal) of tokens'
    (byte length, THE TOKEN HASH): the keys of the set rule 7 looks merged tokens up in."""
    with np.errstate(over="ignore"):
        mixed = np.asarray(hashes, np.uint64) ^ (np.asarray(lengths, np.uint64)
                                                  * np.uint64(0x9E3779B97F4A7C15))
    return pair_hash(mixed) | np.uint64(1)


# ---------------------------------------------------------------- the table on the host

def place_keys(keys: np.ndarray, cap: int) -> np.ndarray:
    """Slots for distinct pair keys in a table of ``cap`` slots, as linear probing from each
    key's home (THE PAIR HASH & (cap - 1)) places them: every slot from a key's home to its slot
    is used. Keys sorted by home take the first free slot at or after it (a running maximum);
    those that run past the end wrap to the front, ahead of the keys homed there."""
    m = len(keys)
    if m > _MAX_LOAD * cap:
        raise ValueError(f"{m} pairs do not fit a table of {cap} slots under 3/4 full")
    home = (pair_hash(keys) & np.uint64(cap - 1)).astype(np.int64)
    order = np.argsort(home, kind="stable")
    virtual = home[order]
    wrapped = np.zeros(m, bool)
    idx = np.arange(m, dtype=np.int64)
    while True:
        seq = np.concatenate([np.flatnonzero(wrapped), np.flatnonzero(~wrapped)])
        v = np.where(wrapped[seq], 0, virtual[seq])
        slot = np.maximum.accumulate(v - idx) + idx if m else v
        over = seq[slot >= cap]
        if not len(over) or wrapped[over].all():
            break
        wrapped[over] = True
    out = np.empty(m, np.int64)
    out[order[seq]] = slot
    return out


def table_from(keys: np.ndarray, counts: np.ndarray, list_len: np.ndarray,
               list_off: np.ndarray, cap: int) -> np.ndarray:
    """The table's uint32 blocks (key_hi, key_lo, c_lo, c_hi, list_len, list_off) holding
    these pairs."""
    t = np.zeros((TABLE_WORDS, cap), np.uint32)
    s = place_keys(keys, cap)
    k = np.asarray(keys, np.uint64)
    c = np.asarray(counts, np.int64).view(np.uint64)
    t[0, s] = (k >> np.uint64(32)) + np.uint64(1)
    t[1, s] = (k & np.uint64(0xFFFFFFFF)) + np.uint64(1)
    t[2, s] = c & np.uint64(0xFFFFFFFF)
    t[3, s] = c >> np.uint64(32)
    t[4, s] = list_len
    t[5, s] = list_off
    return t.reshape(-1)


def table_view(table: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair keys, int64 counts, used) of every slot."""
    t = np.asarray(table).reshape(TABLE_WORDS, cap)
    used = t[0] != 0
    keys = ((t[0].astype(np.uint64) - np.uint64(1)) << np.uint64(32)) | (
        t[1].astype(np.uint64) - np.uint64(1))
    counts = ((t[3].astype(np.uint64) << np.uint64(32)) | t[2].astype(np.uint64)).view(np.int64)
    return keys, counts, used


def index_from_positions(tok, nxt, word_of, wcount, cap: int):
    """Every live pair's count and occurrence list from the positions: (table, cap, pool,
    pairs, occurrences), in ``cap`` slots or the fewest that hold the pairs under 3/4 full. The
    first count, and the host's answer to RELIST."""
    tok, nxt = np.asarray(tok), np.asarray(nxt)
    pos = np.flatnonzero((tok != arrays.DEAD) & (nxt >= 0))
    keys = (tok[pos].astype(np.uint64) << np.uint64(32)) | tok[nxt[pos]].astype(np.uint32)
    order = np.argsort(keys, kind="stable")
    keys, pos = keys[order], pos[order]
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if len(keys) else (
        np.zeros(0, np.int64))
    w = np.asarray(wcount, np.int64)[np.asarray(word_of)[pos]]
    counts = np.add.reduceat(w, starts) if len(keys) else np.zeros(0, np.int64)
    lens = np.diff(np.append(starts, len(keys)))
    cap = max(cap, _pow2_at_least(int(len(starts) / _MAX_LOAD) + 1))
    table = table_from(keys[starts], counts, lens, starts, cap)
    return table, cap, pos.astype(np.uint32), len(starts), len(keys)


def rehash(table: np.ndarray, cap: int, new_cap: int) -> tuple[np.ndarray, int]:
    """The live entries (count != 0), with their lists, in a table of ``new_cap`` slots."""
    t = np.asarray(table).reshape(TABLE_WORDS, cap)
    keys, counts, used = table_view(table, cap)
    live = used & (counts != 0)
    return table_from(keys[live], counts[live], t[4, live], t[5, live], new_cap), int(live.sum())


def choose_candidates(table: np.ndarray, cap: int, room: int) -> tuple[np.ndarray, int, int]:
    """THE CANDIDATE RULE (CUDA's ``choose_candidates``): the best pairs (THE COMPARATOR) filling
    half the candidates' room, the worst of them the boundary (count, key); all pairs when they
    fit (boundary count 0). Returns (slots, boundary count, boundary key)."""
    keys, counts, used = table_view(table, cap)
    slots = np.flatnonzero(used & (counts > 0))
    k = room // 2
    if len(slots) <= k:
        return slots.astype(np.uint32), 0, -1
    c = counts[slots]
    t = int(np.partition(c, len(c) - k)[len(c) - k])  # the k-th largest count
    above = slots[c > t]
    ties = slots[c == t]
    ties = ties[np.argsort(keys[ties], kind="stable")][:k - len(above)]
    chosen = np.concatenate([above, ties])
    return chosen.astype(np.uint32), t, int(keys[ties[-1]].view(np.int64))


def repack_pool(table: np.ndarray, pool: np.ndarray, cap: int, need: int):
    """A pool holding only the lists of pairs still counted, with room for ``need`` more:
    (table, pool, entries used)."""
    t = np.asarray(table).reshape(TABLE_WORDS, cap).copy()
    _, counts, _ = table_view(table, cap)
    live = (counts > 0) & (t[4] > 0)
    slots = np.flatnonzero(live)
    lens = t[4, slots].astype(np.int64)
    total = int(lens.sum())
    starts = np.cumsum(lens) - lens
    src = np.repeat(t[5, slots].astype(np.int64) - starts, lens) + np.arange(total)
    new = np.zeros(max(2 * (total + need), 16), np.uint32)
    new[:total] = np.asarray(pool)[src]
    t[4, ~live] = 0
    t[5, slots] = starts
    return t.reshape(-1), new, total


# ---------------------------------------------------------------- the loop

def setup(ids, offsets, wcounts, vocab, *, vocab_size: int, min_frequency: int,
          block_steps: int = BLOCK_STEPS, candidates: int = CANDIDATES,
          initial_capacity: "int | None" = None, gain_room: "int | None" = None,
          pool_room: "int | None" = None) -> tuple[dict, np.ndarray]:
    """The host arrays of a training run, ready for its first launch (the first count, lists and
    candidates; the ids' THE TOKEN HASH; the specials' spellings), and its state record."""
    n_sym = int(offsets[-1])
    if n_sym >= 2**31 - 1:
        raise ValueError(f"{n_sym} symbols of unique words: the device trainer's int32 "
                         "positions hold at most 2**31 - 2; use backend='numpy'")
    tok, prv, nxt, word_of = arrays.initial_state(ids, offsets)
    n = max(n_sym, PAD)
    pad = n - n_sym
    tok, prv, nxt, word_of = (np.concatenate([np.asarray(x, np.int32), np.full(pad, f, np.int32)])
                              for x, f in zip((tok, prv, nxt, word_of), (arrays.DEAD, -1, -1, 0)))
    wc = np.asarray(wcounts, np.int64)
    wc = np.concatenate([wc, np.zeros(max(PAD - len(wc), 0), np.int64)])
    cap = _pow2_at_least(initial_capacity or 2 * min(max(n_sym, 1), len(vocab) ** 2))
    table, cap, occ, used, total = index_from_positions(tok, nxt, word_of, wc, cap)
    pool = np.zeros(max(total + (pool_room if pool_room is not None else total + 2 * n_sym), 16),
                    np.uint32)
    pool[:total] = occ
    t = table.reshape(TABLE_WORDS, cap)
    gcap = gain_room or max(2 * int(t[4].max(initial=0)), 16)
    cand_room = max(int(candidates), PAD)
    cand_slots, bc, bk = choose_candidates(table, cap, cand_room)
    cand = np.zeros(cand_room, np.uint32)
    cand[:len(cand_slots)] = cand_slots
    n_ids = max(int(vocab_size), len(vocab) + 1, PAD)
    spell_cap = _pow2_at_least(2 * n_ids)
    info = np.zeros(2 * n_ids + spell_cap, np.uint64)
    learned = sorted(vocab.learned)
    for i in learned:
        raw = vocab.token_bytes(i)
        info[i], info[n_ids + i] = len(raw), arrays.token_hash(raw)
    spell = info[2 * n_ids:]
    for p in spelling_print(info[learned], info[n_ids + np.array(learned, np.int64)]).tolist():
        s = p & (spell_cap - 1)
        while spell[s] not in (0, p):
            s = (s + 1) & (spell_cap - 1)
        spell[s] = p
    reserved = vocab.reserved_spellings()
    res_room = max(len(reserved), PAD // 2)
    res = np.zeros(2 * res_room, np.uint64)
    for r, raw in enumerate(reserved):
        res[r], res[res_room + r] = len(raw), arrays.token_hash(raw)
    st = np.zeros(ST["SIZE"], np.int64)
    for name, v in dict(NEXT_ID=len(vocab), VOCAB_LEN=len(vocab), VOCAB_TARGET=int(vocab_size),
                        MIN_COUNT=max(int(min_frequency), 1), CAND_N=len(cand_slots),
                        CAND_CAP=cand_room, BOUND_COUNT=bc, BOUND_KEY=bk, USED=used,
                        USED_LIMIT=int(_MAX_LOAD * cap), POOL_USED=total, POOL_CAP=len(pool),
                        GAINS_CAP=gcap, FORCED_KEY=-1, N_RES=len(reserved), RES_ROOM=res_room,
                        REC_CAP=int(block_steps), N=n, CAP=cap, N_IDS=n_ids,
                        SPELL_CAP=spell_cap).items():
        st[ST[name]] = v
    host = dict(links=np.concatenate([tok, prv, nxt]), word_of=word_of, wcount=wc, table=table,
                pool=pool, cand=cand, tokinfo=info, res=res, reserved=reserved, n_sym=n_sym)
    return host, st


def launch(kernel, dev: dict, st: np.ndarray) -> dict:
    """One launch of ``train_index_steps`` (one threadgroup of the shader's BLOCK threads) over
    ``dev``'s arrays (MLX, or anything MLX takes) with the state record ``st``: the outputs by
    name, lazy (``out_state``, ``rec``, and the new ``links``, ``table``, ``pool``, ``cand``,
    ``tokinfo``)."""
    import mlx.core as mx

    n, cap, gcap = int(st[ST["N"]]), int(st[ST["CAP"]]), int(st[ST["GAINS_CAP"]])
    names = ("links", "table", "pool", "cand", "tokinfo")
    out = kernel(dev["links"], dev["word_of"], dev["wcount"], dev["table"], dev["pool"],
                 dev["cand"], dev["tokinfo"], dev["res"], mx.array(st),
                 output_shapes=[(3 * n,), (TABLE_WORDS * cap,), (dev["pool"].size,),
                                (dev["cand"].size,), (dev["tokinfo"].size,), (ST["SIZE"],),
                                (REC * int(st[ST["REC_CAP"]]),), (n,), (cap + 4 * gcap,)],
                 grid=TRAIN_BLOCK, threadgroup=TRAIN_BLOCK)
    return dict(zip(names, out[:5]), out_state=out[5], rec=out[6])


def train_on_metal(ids, offsets, wcounts, vocab, *, vocab_size: int, min_frequency: int,
                   kernels: KernelFactory, on_merge: "Callable[[int], None] | None" = None,
                   block_steps: int = BLOCK_STEPS, candidates: int = CANDIDATES,
                   initial_capacity: "int | None" = None, gain_room: "int | None" = None,
                   pool_room: "int | None" = None,
                   stats: "dict | None" = None) -> list[tuple[int, int, int]]:
    """Run the indexed merge loop with ``kernels``' ``train_index_steps``; returns the merges.

    ``ids``/``offsets``/``wcounts``: the words (``train.cpu.word_arrays``); ``vocab`` grows with
    the merged tokens. ``block_steps``, ``candidates``, ``initial_capacity`` (table slots),
    ``gain_room`` (a step's gains) and ``pool_room`` (list entries) size the loop (the tests
    make them small, so every stop happens; each grows when a step needs more). ``stats``, when
    given, counts the launches (``"blocks"``) and the stops by name, and lists per merge the
    work of its step (``"work"``: occurrence-list entries + matches + gains, candidates
    scanned, rule 7's probes and specials compared) and per launch the elements its copy
    moved (``"copied"``).
    """
    import mlx.core as mx


    stats = {} if stats is None else stats
    host, st = setup(ids, offsets, wcounts, vocab, vocab_size=vocab_size,
                     min_frequency=min_frequency, block_steps=block_steps, candidates=candidates,
                     initial_capacity=initial_capacity, gain_room=gain_room,
                     pool_room=pool_room)
    reserved, n_sym = host.pop("reserved"), host.pop("n_sym")
    dev = {k: mx.array(v) for k, v in host.items()}
    n, cap, gcap = int(st[ST["N"]]), int(st[ST["CAP"]]), int(st[ST["GAINS_CAP"]])
    cand_room = int(st[ST["CAND_CAP"]])
    kernel = kernels("train_index_steps")
    merges: list[tuple[int, int, int]] = []

    def seen(what: str) -> None:
        stats[what] = stats.get(what, 0) + 1

    while True:
        copied = (3 * n + n + TABLE_WORDS * cap + dev["pool"].size + dev["cand"].size
                  + dev["tokinfo"].size + cap)
        out = launch(kernel, dev, st)
        dev.update((k, out[k]) for k in ("links", "table", "pool", "cand", "tokinfo"))
        st_got, rec_got = read_back([out["out_state"], out["rec"]])
        st = st_got.astype(np.int64).copy()
        seen("blocks")
        stats.setdefault("copied", []).append(int(copied))
        k = int(st[ST["STEPS"]])
        recs = rec_got.reshape(-1, REC)[:k]
        stats.setdefault("work", []).extend(map(tuple, recs[:, 4:].tolist()))
        arrays.take_merges(vocab, recs[:, :3].tolist(), merges, on_merge)
        why = int(st[ST["STOP"]])
        name = next((key for key, v in STOP.items() if v == why), str(why))
        seen(name)
        if why in (STOP["TARGET"], STOP["MIN"]):
            return merges
        new_candidates = why == STOP["REBUILD"]
        if why == STOP["REHASH"]:
            room = max(2 * gcap, int(st[ST["NEED"]]))
            new_cap = _pow2_at_least(int((int(st[ST["USED"]]) + room) / _MAX_LOAD) + 1)
            host_t, live = rehash(read_back([dev["table"]])[0], cap, new_cap)
            dev["table"], cap = mx.array(host_t), new_cap
            st[ST["CAP"]], st[ST["USED"]] = cap, live
            st[ST["USED_LIMIT"]] = int(_MAX_LOAD * cap)
            new_candidates = True
        elif why == STOP["POOL"]:
            need = max(gcap, int(st[ST["NEED"]]))
            host_t, host_p, total = repack_pool(*read_back([dev["table"], dev["pool"]]), cap, need)
            dev["table"], dev["pool"] = mx.array(host_t), mx.array(host_p)
            st[ST["POOL_USED"]], st[ST["POOL_CAP"]] = total, len(host_p)
        elif why == STOP["GAINS"]:
            gcap = max(2 * gcap, int(st[ST["NEED"]]))
            st[ST["GAINS_CAP"]] = gcap
        elif why == STOP["RESERVED"]:  # rule 7: compare the bytes the hash matched
            a, b = int(st[ST["A"]]), int(st[ST["B"]])
            st[ST["FORCED_KEY"]] = (a << 32) | b
            st[ST["FORCED_ID"]] = arrays.existing_id(vocab, reserved, a, b)
        elif why == STOP["RELIST"]:  # a pair gained that had a list: list every pair again
            host_links = read_back([dev["links"]])[0]
            host_t, cap, occ, used, total = index_from_positions(
                host_links[:n], host_links[2 * n:], host["word_of"], host["wcount"], cap)
            host_p = np.zeros(max(2 * total + 2 * n_sym, 16), np.uint32)
            host_p[:total] = occ
            dev["table"], dev["pool"] = mx.array(host_t), mx.array(host_p)
            st[ST["USED"]], st[ST["POOL_USED"]], st[ST["POOL_CAP"]] = used, total, len(host_p)
            st[ST["CAP"]], st[ST["USED_LIMIT"]] = cap, int(_MAX_LOAD * cap)
            st[ST["ANOMALY"]] = 0
            new_candidates = True
        if new_candidates:
            slots, bc, bk = choose_candidates(read_back([dev["table"]])[0], cap, cand_room)
            host_c = np.zeros(cand_room, np.uint32)
            host_c[:len(slots)] = slots
            dev["cand"] = mx.array(host_c)
            st[ST["CAND_N"]], st[ST["CAND_FULL"]] = len(slots), 0
            st[ST["BOUND_COUNT"]], st[ST["BOUND_KEY"]] = bc, bk
        st[ST["STOP"]] = 0
