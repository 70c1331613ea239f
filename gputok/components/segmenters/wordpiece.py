"""WordPiece (BERT ``tokenizer.json``, ``tokenizer.ggml.model = bert``): the segmenter.

``cpu_ref/wordpiece.py`` is the spec (checked against HF). A BERT model is composed of

    split       added tokens ([CLS], [SEP]...: special ones under the allowed/disallowed contract)
    normaliser  ``normalizers.BertNormalizer``, fused into the pre-tokenizer's pass
    pretok      ``pretokenizers.BertPreTokenizer`` on pinned tables -> words
    segment     per distinct word, greedy longest match from the left, "##" on non-initial
                pieces; one failure (or more than ``max_input_chars_per_word`` characters)
                makes the whole word one unk id

What kernels/encode_wordpiece.cu must compute (``encode_wordpiece`` is its numpy reference, one
"thread" per word, vectorised across words): the vocabulary is a byte trie whose transitions
live in the merge table's hash layout (``(node << 32 | byte) -> (child, id of the token ending
at child)``), so the kernel probes it with the same function as the BPE merge. From the root
(word start) or from the node the prefix "##" leads to (continuations), walk the word's bytes as
far as the trie goes and remember the last node that ends a token: that is the longest match.
Tokens are whole UTF-8 strings, so a match always ends on a character boundary of the word,
exactly as HF's character-wise search. A word of L bytes has at most L pieces: its ids fit the
slots of its own bytes in the scratch buffer, as BPE pieces do.

Performance notes: the scalar path (a dict probe per candidate end, longest first) wins below
``VECTOR_MIN`` words; above, the vectorised walk advances every word's search by one byte per
numpy step (~20 steps per round, one round per piece). On a device backend (CUDA, native) the
words are cut on the host and only the longest match runs in the kernel: cutting them one
``split`` call per segment with a ``str`` and a ``bytes`` object per word was ~60% of a native
run (cProfile, 2 MB of prose); ``BertSteps.words_bytes_batch`` cuts a whole chunk into one UTF-8
buffer + word offsets (``hostplan.entries_from_words``): 2.6x less host time, and the BERT
normaliser itself is then most of what is left. On the native device BERT's cut
(``kernels/host_bert.h``) resolves every word itself from ``whole_words`` (the whole-word lookup,
then the longest match, memoised across chunks): the kernel's trie walk probed a 4 MB hash table
for every byte of every word it got, most probes a cache miss.
"""

from __future__ import annotations

import functools

import numpy as np

from ...stages import counters
from .. import SegmenterDevice
from . import Base
from ...stages.merge import VECTOR_MIN
from ...stages.table import NO_MERGE, MergeTable

NO_TOKEN = 0xFFFFFFFF
ROOT = 0


class WordPieceFamily(Base):
    """The tables of one WordPiece model.

    >>> wp = WordPieceFamily({"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3})
    >>> wp.segment(["unaffable", "unable", "x"])
    [(1, 2, 3), (1, 3), (0,)]
    """

    name = "WordPiece"

    def __init__(self, vocab: dict, *, unk_token: str = "[UNK]", prefix: str = "##",
                 max_input_chars_per_word: int = 100, where: str = "WordPiece"):
        if unk_token not in vocab:
            raise ValueError(f"{where}: unk_token {unk_token!r} is not in the vocabulary")
        self.vocab = vocab
        self.unk_id = vocab[unk_token]
        self.prefix = prefix
        self.max_chars = int(max_input_chars_per_word)
        # the device form: kernels/encode_wordpiece.cu walks the trie (not in one-call forms)
        self.device = SegmenterDevice(stage="wordpiece", kernel="encode_wordpiece",
                                      one_call=False, tables=self.device_tables)
        self.max_tok = max((len(t) for t in vocab), default=1)
        self._build_trie()

    def _build_trie(self) -> None:
        """The byte trie as a merge-table hash: (node, byte) -> (child, token id at child)."""
        edges: dict[int, int] = {}  # node << 8 | byte -> child
        term: list = [NO_TOKEN]
        for tok, i in self.vocab.items():
            node = ROOT
            for b in tok.encode("utf-8"):
                key = node << 8 | b
                child = edges.get(key)
                if child is None:
                    child = edges[key] = len(term)
                    term.append(NO_TOKEN)
                node = child
            term[node] = i
        self.n_nodes = len(term)
        self.term = np.array(term, np.uint32)
        pairs = {(k >> 8) << 32 | (k & 0xFF): (c, term[c]) for k, c in edges.items()}
        self.trie = MergeTable(pairs, np.zeros(256, np.uint32), None)
        node = ROOT
        for b in self.prefix.encode("utf-8"):
            node = edges.get(node << 8 | b, NO_TOKEN) if node != NO_TOKEN else NO_TOKEN
        self.cont = node  # where continuation pieces start (NO_TOKEN: none exist)

    def device_tables(self) -> tuple[dict, dict]:
        """(host arrays, kernel scalars) of the device form: the trie in the merge table's
        hash layout, where continuation pieces start, the unk id, the word length cap."""
        t = self.trie
        return ({"t_slots": t},
                {"t_bits": np.uint32(t.hash_bits), "cont": np.uint32(self.cont),
                 "unk": np.uint32(self.unk_id),
                 "max_chars": np.uint32(min(self.max_chars, 0xFFFFFFFF))})

    @functools.cached_property
    def whole_words(self) -> tuple:
        """(blob, offsets, ids, prefix, unk id, max_chars): every entry's UTF-8 bytes and id,
        with what the match needs besides, for a device that cuts the words and resolves them
        itself (``kernels/host_bert.h``: THE WHOLE-WORD LOOKUP, then THE WORDPIECE MATCH of the
        other words), so no word is left for the kernel's trie walk."""
        toks = [(t.encode("utf-8"), i) for t, i in self.vocab.items() if t]
        lens = np.fromiter((len(b) for b, _ in toks), np.int64, len(toks))
        off = np.zeros(len(toks) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        return (b"".join(b for b, _ in toks) or b"\0", off,
                np.fromiter((i for _, i in toks), np.uint32, len(toks)),
                self.prefix.encode("utf-8"), self.unk_id, self.max_chars)

    # ---- the segmenter ---------------------------------------------------------------------------

    def segment(self, words: list) -> list:
        if len(words) < VECTOR_MIN:
            counters["wordpiece.scalar"] += len(words)
            return [tuple(self.word(w)) for w in words]
        raw = [w.encode("utf-8") for w in words]
        pstart = np.zeros(len(raw) + 1, np.int64)
        np.cumsum([len(b) for b in raw], out=pstart[1:])
        buf = np.frombuffer(b"".join(raw), np.uint8)
        scratch, count = encode_wordpiece(buf, pstart, self)
        counters["wordpiece.vector"] += len(words)
        s, c, p = scratch.tolist(), count.tolist(), pstart.tolist()
        return [tuple(s[p[k]:p[k] + c[k]]) for k in range(len(words))]

    def word(self, w: str) -> list:
        """One word, the scalar way (HF's loop with the search capped at the longest token)."""
        if len(w) > self.max_chars:
            return [self.unk_id]
        vocab, prefix, cap = self.vocab, self.prefix, self.max_tok
        out, start, n = [], 0, len(w)
        while start < n:
            for end in range(min(n, start + cap), start, -1):  # the longest candidate first
                i = vocab.get(w[start:end] if start == 0 else prefix + w[start:end])
                if i is not None:
                    out.append(i)
                    start = end
                    break
            else:
                return [self.unk_id]  # one failure spoils the whole word
        return out


def encode_wordpiece(buf: np.ndarray, pstart: np.ndarray, wp: WordPieceFamily
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The reference of ``encode_wordpiece`` (kernels/encode_wordpiece.cu): word ``e`` is
    ``buf[pstart[e]:pstart[e + 1]]``; returns (scratch, count): its ids are
    ``scratch[pstart[e]:pstart[e] + count[e]]``."""
    n_words = len(pstart) - 1
    start = pstart[:-1].astype(np.int64)
    end = pstart[1:].astype(np.int64)
    scratch = np.zeros(max(len(buf), 1), np.uint32)
    count = np.zeros(n_words, np.int64)
    # characters per word: bytes that are not UTF-8 continuation bytes
    lead = np.concatenate([[0], np.cumsum((buf & 0xC0) != 0x80)])
    fail = (lead[end] - lead[start]) > wp.max_chars
    pos = start.copy()
    active = np.flatnonzero(~fail & (pos < end))
    while len(active):
        node = np.where(pos[active] == start[active], ROOT, wp.cont).astype(np.uint32)
        best_len = np.zeros(len(active), np.int64)
        best_id = np.zeros(len(active), np.uint32)
        p = pos[active].copy()
        walk = np.flatnonzero((node != NO_TOKEN) & (p < end[active]))
        while len(walk):
            child, tok = wp.trie.lookup(node[walk], buf[p[walk]].astype(np.uint32))
            live = child != NO_MERGE
            walk = walk[live]
            node[walk] = child[live]
            p[walk] += 1
            hit = tok[live] != NO_TOKEN
            best_len[walk[hit]] = p[walk[hit]] - pos[active[walk[hit]]]
            best_id[walk[hit]] = tok[live][hit]
            walk = walk[p[walk] < end[active[walk]]]
        found = best_len > 0
        fail[active[~found]] = True
        ok = active[found]
        scratch[start[ok] + count[ok]] = best_id[found]
        count[ok] += 1
        pos[ok] += best_len[found]
        active = ok[pos[ok] < end[ok]]
    bad = np.flatnonzero(fail)
    scratch[start[bad]] = wp.unk_id
    count[bad] = 1
    return scratch, count
