"""A byte trie in the merge table's hash layout, walked for many start positions at once.

Transitions are ``(node << 32 | byte) -> (child, id of the entry ending at child)`` in a
``MergeTable`` (so a device probes it with the merge table's function, as WordPiece's kernel
does). ``matches`` walks every start position one byte per numpy step: the entries that are a
prefix of the text at each start, shortest first.
"""

from __future__ import annotations

import numpy as np

from ...stages.table import NO_MERGE, MergeTable

NO_ENTRY = 0xFFFFFFFF
ROOT = 0


class ByteTrie:
    """The entries of ``keys`` (bytes -> id).

    >>> t = ByteTrie({b"a": 0, b"ab": 1, b"b": 2})
    >>> starts, ends, ids = t.matches(np.frombuffer(b"abb", np.uint8), np.array([0, 1, 2]),
    ...                               np.array([3, 3, 3]))
    >>> list(zip(starts.tolist(), ends.tolist(), ids.tolist()))
    [(0, 1, 0), (1, 2, 2), (2, 3, 2), (0, 2, 1)]
    """

    def __init__(self, keys: "dict[bytes, int]"):
        # Built without a Python step per byte (a 250K-piece vocabulary: ~2M prefixes): the
        # keys sorted, each one's common prefix with the one before (``lcp``), then depth by
        # depth a key opens a new node where it leaves its predecessor's path (depth > lcp),
        # else it is on the node its predecessor is on.
        items = sorted(keys.items())
        n = len(items)
        blobs = [k for k, _ in items]
        lens = np.fromiter(map(len, blobs), np.int64, n)
        start = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=start[1:])
        flat = np.frombuffer(b"".join(blobs), np.uint8)
        self.max_len = int(lens.max()) if n else 0
        lcp = np.zeros(n, np.int64)
        same = np.arange(1, n)  # keys still equal to their predecessor so far
        for d in range(self.max_len):
            same = same[(lens[same] > d) & (lens[same - 1] > d)]
            same = same[flat[start[same] + d] == flat[start[same - 1] + d]]
            lcp[same] += 1
            if not len(same):
                break
        node = np.zeros(n, np.int64)  # each key's node at the previous depth (root: 0)
        next_id = 1
        keys_out, child_out = [], []
        for d in range(1, self.max_len + 1):
            alive = np.flatnonzero(lens >= d)
            opens = lcp[alive] < d
            new = np.cumsum(opens) - 1 + next_id
            first = np.where(opens, np.arange(len(alive)), 0)
            np.maximum.accumulate(first, out=first)
            child = np.where(opens, new, new[first])  # (a key on its predecessor's node)
            o = alive[opens]
            keys_out.append((node[o].astype(np.uint64) << np.uint64(32))
                            | flat[start[o] + d - 1].astype(np.uint64))
            child_out.append(child[opens])
            next_id += int(opens.sum())
            node[alive] = child
        term = np.full(next_id, NO_ENTRY, np.uint32)
        term[node] = np.fromiter((i for _, i in items), np.uint32, n)  # (the keys' own ends)
        pair_keys = np.concatenate(keys_out) if keys_out else np.zeros(0, np.uint64)
        child = (np.concatenate(child_out) if child_out else np.zeros(0, np.int64))
        self.table = MergeTable(None, np.zeros(256, np.uint32), None, arrays={
            "pair_keys": pair_keys, "pair_prio": child.astype(np.uint32),
            "pair_merged": term[child]})

    def matches(self, buf: np.ndarray, starts: np.ndarray, limits: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every entry that is a prefix of ``buf[s:limit]`` for each start ``s`` (with its
        ``limit``): (starts, ends, ids), ordered by length, then by start."""
        node = np.zeros(len(starts), np.uint32)
        pos = np.asarray(starts, np.int64).copy()
        lim = np.asarray(limits, np.int64)
        live = np.flatnonzero(pos < lim)
        out_s, out_e, out_i = [], [], []
        while len(live):
            child, tok = self.table.lookup(node[live], buf[pos[live]].astype(np.uint32))
            ok = child != NO_MERGE
            live, child, tok = live[ok], child[ok], tok[ok]
            node[live] = child
            pos[live] += 1
            hit = tok != NO_ENTRY
            out_s.append(np.asarray(starts)[live[hit]])
            out_e.append(pos[live[hit]])
            out_i.append(tok[hit])
            live = live[pos[live] < lim[live]]
        if not out_s:
            z = np.zeros(0, np.int64)
            return z, z, np.zeros(0, np.uint32)
        return (np.concatenate(out_s).astype(np.int64), np.concatenate(out_e),
                np.concatenate(out_i))
