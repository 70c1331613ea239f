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
        edges: dict[int, int] = {}  # node << 8 | byte -> child
        term: list = [NO_ENTRY]
        for key, i in keys.items():
            node = ROOT
            for b in key:
                k = node << 8 | b
                child = edges.get(k)
                if child is None:
                    child = edges[k] = len(term)
                    term.append(NO_ENTRY)
                node = child
            term[node] = i
        pairs = {(k >> 8) << 32 | (k & 0xFF): (c, term[c]) for k, c in edges.items()}
        self.table = MergeTable(pairs, np.zeros(256, np.uint32), None)
        self.max_len = max(map(len, keys), default=0)

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
