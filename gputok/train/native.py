"""The native CPU trainer (backend ``"native"``): word counting and HF's merge loop in the native
library (``kernels/host_train_words.h``, ``kernels/host_train_merge.h``), on every core.

* **Words**: batches of packed UTF-8 documents (``words.corpus_batches``: files through the
  corpus readers, str lists packed) go to a counter that runs the encoder's own pre-tokenizer
  (the pattern's scanner tables, HF's pinned Unicode data) and counts the pieces in a sharded
  table; memory holds the unique words, bounded by THE PRUNE RULE (``host_train_words.h``).
  Patterns the native pre-tokenizer does not know are split by the Python path (``words.py``)
  and counted there; the merge loop is native either way.
* **Merges**: ``host_train_merge.h``, work proportional to the merged pair's occurrences; the
  loop runs in blocks of merges so progress shows and Ctrl-C is taken between blocks.

The library is the native CPU device's (built on first use by ``backends/native/build.py``);
without a C++ compiler ``available()`` says why and ``"auto"`` takes the numpy trainer.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Callable, Iterable

import numpy as np

from .wordset import WordCounts

#: merges per call into the library: progress and Ctrl-C come between calls
BLOCK_MERGES = 256
_STATS = ("n_words", "bytes", "table_bytes", "pieces", "floor", "pruned_words", "pruned_count")


def available() -> tuple[bool, str]:
    from ..backends import native as nb

    return nb.available()


@functools.lru_cache(maxsize=None)
def _lib(path: str):
    lib = ctypes.CDLL(path)
    vp, ll, i, u = ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_uint
    lib.gputok_train_words_new.argtypes = [vp, vp, u, i, i, i, i, vp, i, ll]
    lib.gputok_train_words_new.restype = vp
    lib.gputok_train_words_free.argtypes = [vp]
    lib.gputok_train_words_add.argtypes = [vp, vp, vp, ll]
    lib.gputok_train_words_add.restype = i
    lib.gputok_train_words_add_spm.argtypes = [vp, vp, vp, ll, i, vp, u, vp, u, u, vp, vp, ll,
                                                ll, i]
    lib.gputok_train_words_add_spm.restype = i
    lib.gputok_train_words_stats.argtypes = [vp, vp]
    lib.gputok_train_words_export.argtypes = [vp, vp, vp, vp, ll, vp]
    lib.gputok_train_merge_new.argtypes = [vp, vp, vp, ll, vp, vp, vp, ll, vp, vp, vp, ll, ll, i, i]
    lib.gputok_train_merge_new.restype = vp
    lib.gputok_train_spm_new.argtypes = [vp, vp, vp, ll, vp, vp, ll, vp, vp, vp, ll, i, i, i, i]
    lib.gputok_train_spm_new.restype = vp
    lib.gputok_train_merge_free.argtypes = [vp]
    lib.gputok_train_merge_run.argtypes = [vp, ll, ll, ll, vp]
    lib.gputok_train_merge_run.restype = ll
    lib.gputok_train_merge_stats.argtypes = [vp, vp]
    return lib


def library():
    """The native library with the training entry points declared (built on first use)."""
    from ..backends import native as nb

    return _lib(nb.library().path)


_par_min = 0  # words per worker of a parallel step (0: the library's; tests lower it)


def _threads() -> int:
    from ..backends.native import threads_default

    return threads_default()


def _addr(a: np.ndarray) -> int:
    return a.ctypes.data


# ---------------------------------------------------------------- words


def pretok_params(pattern: str) -> "tuple | None":
    """The native pre-tokenizer's tables for ``pattern`` as HF's trainer splits it (the scanner
    with HF's Unicode tables), or None where the pattern has no native form."""
    from ..stages.scan import scanner_for_pattern

    sc = scanner_for_pattern(pattern, "hf")
    if sc is None:
        return None
    sc._setup()
    cls = np.ascontiguousarray(sc.family.tables(sc.unicode_family), np.uint8)
    letters = np.ascontiguousarray(sc._letters, np.uint8)
    o200k = sc._kind == "o200k"
    return (cls, letters, len(letters), int(o200k), int(sc._kind == "gpt2" and not o200k),
            0 if o200k else int(sc.digit_group), 0 if o200k else int(bool(sc.end_whole)))


class WordCounter:
    """The native word counter for one pattern (``pretok_params``): ``add`` batches, then
    ``result()``. ``budget``: bytes of unique words before THE PRUNE RULE (0: no limit)."""

    def __init__(self, params: "tuple | None", threads: int, budget: int = 0):
        self.lib = library()
        self._keep = params  # the tables must outlive the counter
        if params is None:  # (``add_spm`` only: no pre-tokenizer)
            z = np.zeros(256, np.uint8)  # (an empty class table: its ASCII part is read)
            params = self._keep = (z, z, 0, 0, 0, 0, 0)
        cls, letters, n_letters, o200k, gpt2, group, end_whole = params
        from ..backends.native.perdoc import ascii_nibbles

        # THE ASCII NIBBLES of the class table, for the encoder's finder the counter runs
        self._nibbles = ascii_nibbles(cls)
        self.ctx = self.lib.gputok_train_words_new(_addr(cls), _addr(letters), n_letters, o200k,
                                                   gpt2, group, end_whole, _addr(self._nibbles),
                                                   int(threads), int(budget))
        if not self.ctx:
            raise MemoryError("gputok train: no memory for the word counter")

    def add(self, buf, offsets: np.ndarray) -> None:
        """Count the words of documents ``buf[offsets[d]:offsets[d + 1]]`` (valid UTF-8)."""
        offsets = np.ascontiguousarray(offsets, np.int64)
        n = len(offsets) - 1
        if n <= 0 or offsets[-1] == offsets[0]:
            return
        if int(offsets[-1] - offsets[0]) >= 1 << 32:
            raise ValueError("a batch of 4 GB or more; read the corpus in smaller batches")
        data = np.frombuffer(buf, np.uint8) if not isinstance(buf, np.ndarray) else buf
        if self.lib.gputok_train_words_add(self.ctx, _addr(data), _addr(offsets), n) != 0:
            raise MemoryError("gputok train: out of memory counting words (lower "
                              "max_word_memory to prune sooner)")

    def add_spm(self, buf: bytes, offsets: np.ndarray, sep: int, spm: "SpmWordRules") -> None:
        """Count SentencePiece training's words (``host_train_spm_words.h``) of sentences
        ``buf[offsets[d]:offsets[d + 1] - sep]`` (valid UTF-8)."""
        offsets = np.ascontiguousarray(offsets, np.int64)
        n = len(offsets) - 1
        if n <= 0:
            return
        if int(offsets[-1]) >= 1 << 32:
            raise ValueError("a batch of 4 GB or more; read the corpus in smaller batches")
        r = spm
        if self.lib.gputok_train_words_add_spm(
                self.ctx, buf, _addr(offsets), n, int(sep), _addr(r.units), len(r.units),
                _addr(r.strings), len(r.strings), r.norm_flags, _addr(r.keys), _addr(r.key_off),
                len(r.key_off) - 1, r.max_len, r.split) != 0:
            raise MemoryError("gputok train: out of memory counting words")

    def stats(self) -> dict:
        out = np.zeros(len(_STATS), np.int64)
        self.lib.gputok_train_words_stats(self.ctx, _addr(out))
        return dict(zip(_STATS, out.tolist()))

    def result(self) -> WordCounts:
        """Every word counted (the counter is emptied as they are copied)."""
        st = self.stats()
        data = np.empty(max(st["bytes"], 1), np.uint8)
        offsets = np.empty(st["n_words"] + 1, np.int64)
        counts = np.empty(max(st["n_words"], 1), np.int64)
        got = np.zeros(1, np.int64)
        self.lib.gputok_train_words_export(self.ctx, _addr(data), _addr(offsets), _addr(counts),
                                           0, _addr(got))
        k = int(got[0])
        return WordCounts(data[:int(offsets[k])], offsets[:k + 1], counts[:k],
                          pieces=st["pieces"], prune_floor=st["floor"],
                          pruned_words=st["pruned_words"], pruned_count=st["pruned_count"])

    def close(self) -> None:
        if self.ctx:
            self.lib.gputok_train_words_free(self.ctx)
            self.ctx = None

    __del__ = close


class SpmWordRules:
    """What ``WordCounter.add_spm`` needs of SentencePiece training's settings: the charsmap's
    trie units and strings (none: identity), the normaliser's flags, the meta pieces (longest
    first) and the split settings."""

    def __init__(self, blob: bytes, norm_flags: int, meta: list, max_len: int, split: int):
        if blob:
            from ..components.normalizers.charsmap import CharsMap

            cm = CharsMap(blob)
            self.units = np.ascontiguousarray(cm.units, np.uint32)
            self.strings = np.frombuffer(cm.strings, np.uint8)
        else:
            self.units, self.strings = np.zeros(0, np.uint32), np.zeros(0, np.uint8)
        keys = [k.encode("utf-8") for k in meta]
        self.keys = np.frombuffer(b"".join(keys) or b"\0", np.uint8)
        self.key_off = np.zeros(len(keys) + 1, np.int64)
        np.cumsum([len(k) for k in keys], out=self.key_off[1:])
        self.norm_flags, self.max_len, self.split = int(norm_flags), int(max_len), int(split)


def count_batches(batches: Iterable, params: tuple, *, threads: int, budget: int = 0,
                  on_progress: "Callable[[int, int], None] | None" = None) -> WordCounts:
    """Words of ``(buf, offsets, progress_units)`` batches, counted natively."""
    counter = WordCounter(params, threads, budget)
    try:
        for buf, offsets, units in batches:
            counter.add(buf, offsets)
            if on_progress is not None:
                on_progress(units, counter.stats()["n_words"])
        return counter.result()
    finally:
        counter.close()
        _trim()


def _trim() -> None:
    """Give freed heap memory back to the system (glibc's ``malloc_trim``): the counter's
    worker threads allocate in their own arenas, which glibc keeps after they are freed, so the
    merge phase would start with the word phase's peak still resident."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):  # not glibc
        pass


# ---------------------------------------------------------------- merges


def _id_bytes(vocab) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of every id of ``vocab`` so far (none for a special token's id)."""
    parts = [vocab.token_bytes(i) if i in vocab.learned else b"" for i in range(len(vocab))]
    off = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=off[1:])
    return np.frombuffer(b"".join(parts) or b"\0", np.uint8), off


def train_words(words: WordCounts, vocab, *, vocab_size: int, min_frequency: int,
                on_merge: "Callable[[int], None] | None" = None,
                on_log: "Callable[[int, int, int, int], None] | None" = None,
                threads: "int | None" = None) -> list[tuple[int, int, int]]:
    """HF's merge loop on counted words (same contract as ``cpu.train_words``); ``threads``
    rewrite the words of the big steps (default: every core this process may use)."""
    lib = library()
    data = np.ascontiguousarray(words.data, np.uint8)
    offsets = np.ascontiguousarray(words.offsets, np.int64)
    counts = np.ascontiguousarray(words.counts, np.int64)
    byte_ids = np.ascontiguousarray(vocab.byte_ids, np.uint32)
    tb, to = _id_bytes(vocab)
    res = vocab.reserved_spellings()  # rule 7: {bytes: id}
    rb = np.frombuffer(b"".join(res) or b"\0", np.uint8)
    ro = np.zeros(len(res) + 1, np.int64)
    np.cumsum([len(r) for r in res], out=ro[1:])
    rid = np.array(list(res.values()) or [0], np.uint32)
    ctx = lib.gputok_train_merge_new(_addr(data) if len(data) else 0, _addr(offsets),
                                     _addr(counts), len(counts), _addr(byte_ids), _addr(tb),
                                     _addr(to), len(vocab), _addr(rb), _addr(ro), _addr(rid),
                                     len(res), len(vocab), int(threads or _threads()),
                                     int(_par_min))
    if not ctx:
        raise MemoryError("gputok train: out of memory building the pair counts")
    merges: list[tuple[int, int, int]] = []
    out = np.empty(4 * BLOCK_MERGES, np.int64)
    min_count = max(int(min_frequency), 1)
    try:
        while True:
            done = lib.gputok_train_merge_run(ctx, BLOCK_MERGES, int(vocab_size), min_count,
                                              _addr(out))
            if done < 0:
                raise MemoryError("gputok train: out of memory in the merge loop")
            rows = out[:4 * done].reshape(-1, 4)
            for a, b, c, n in rows.tolist():
                got = vocab.merge(a, b)
                if got != c:  # the library and the Vocab apply the same rule 7
                    raise RuntimeError(f"merge {len(merges)}: id {c} from the library, {got} "
                                       "from the vocabulary")
                merges.append((a, b, c))
                if on_log is not None:
                    on_log(a, b, c, n)
            if on_merge is not None:
                on_merge(len(merges))
            if done < BLOCK_MERGES:
                return merges
    finally:
        lib.gputok_train_merge_free(ctx)
