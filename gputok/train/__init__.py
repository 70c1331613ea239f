"""Training byte-level BPE vocabularies, with HF ``BpeTrainer``'s exact rule (stated in
``cpu_ref.train``).

Two phases:

1. **Words**: the corpus is streamed in batches and unique words are counted; memory holds the
   words, not the corpus. The native counter (``native.py``: the encoder's pre-tokenizer on
   every core) where the pattern has a native form and a C++ compiler is there, else the
   Python pre-tokenizer stage (``words.py``).
2. **Merges**: HF's incremental loop with a lazy max-heap, work proportional to the merged
   pair's occurrences: native (``native.py``, backend ``"native"``) or Python + numpy
   (``cpu.py``, backend ``"numpy"``); on a device (``backends/<device>/train.py``, registered
   in ``backends/devices.py``: ``"cuda"``, ``"metal"``) the words live on the device as linked
   symbol arrays, pair counts in a device hash table, and every merge step runs as kernels
   (``kernels/train_bpe.cu``, ``shaders/train_*.metal``).

The result is an ``Encoding`` whose merge table is the trained merges in order (HF's rule;
``enc.trained_merges`` lists them as ``(left_id, right_id, merged_id)``). ``gputok.export``
writes it as a ``tokenizer.json`` (the merges verbatim) or a ``.tiktoken`` file (ids as ranks).
The two rules give the same ids on such a vocabulary: every learned token has a distinct string
and a larger id than its parts, and tiktoken's "merge the adjacent pair whose concatenation has
the lowest rank" then always picks the pair HF's merge list would (the argument in
rule 7 of ``cpu_ref.train``: a piece's symbols are segmented as when its token was made). The one
exception is a learned token spelled like a special token, which takes the special's small id.
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from dataclasses import dataclass

import numpy as np

from .. import patterns
from ..backends.devices import trainer_names
from ..unicode import compile_pinned

from .progress import MergeLog, Progress
from .vocab import ID_ORDERS, Vocab
from .wordset import WordCounts
from .words import corpus_batches, corpus_texts, count_words

__all__ = ["train_bpe", "train_spm_bpe", "TrainStats"]



@dataclass
class TrainStats:
    """What the last ``train_bpe`` call did (``gputok.train.last_stats``)."""

    backend: str = ""  # the merge loop's
    words_backend: str = ""  # the word counter's: "native" or "python"
    n_words: int = 0  # unique words
    n_merges: int = 0
    words_s: float = 0.0
    merges_s: float = 0.0
    vocab_size: int = 0
    exact: bool = True  # False when THE PRUNE RULE dropped words (merges may differ from HF's)
    prune_floor: int = 0
    pruned_words: int = 0
    pruned_count: int = 0


last_stats = TrainStats()


def default_word_memory() -> int:
    """A quarter of the machine's memory: the word table's budget before THE PRUNE RULE."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def train_bpe(corpus, *, vocab_size: int, pattern: str = "cl100k", special_tokens=(),
              min_frequency: int = 2, backend: str = "auto", name: "str | None" = None,
              progress: bool = False, field: str = "text", errors: str = "strict",
              id_order: str = "hf", specials_at: "str | None" = None, verbose: bool = False,
              threads: "int | None" = None, max_word_memory: "int | None" = None):
    """Train a byte-level BPE vocabulary exactly as HF ``tokenizers``' ``BpeTrainer`` does
    (behind ``Split(pattern, "isolated")`` + ``ByteLevel``, with all 256 bytes in the alphabet).

    - ``corpus``: an iterable of str, a list of str, a ``pathlib.Path`` or list of Paths
      (.txt / .jsonl / .parquet / .arrow, optionally .gz; ``field`` names the JSON field or
      column, ``errors`` says what to do with invalid UTF-8), or a pyarrow string array.
    - ``vocab_size``: the final number of ids, special tokens and the 256 bytes included.
    - ``pattern``: the pre-tokenizer regex, or ``gpt2`` / ``cl100k`` / ``o200k``.
    - ``special_tokens``: training text containing them is ordinary text (as in HF).
    - ``min_frequency``: stop when the best pair occurs fewer times (HF's ``BpeTrainer``
      defaults to 0, which acts as 1; ``ByteLevelBPETokenizer.train`` and gputok to 2).
    - ``id_order``: ``"hf"`` (HF's ids: specials, the alphabet by byte-level character, merges;
      HF's merges) or ``"bytes"`` (byte b = id b, merges from 256: minbpe / tiktoken / nanochat;
      ties ordered by byte value, as rustbpe's). ``specials_at``: ``"start"`` or ``"end"``
      (the default for ``"bytes"``) of the ids; see ``gputok.train.vocab``.
    - ``backend``: ``"auto"`` (CUDA when CuPy sees a GPU, else native when a C++ compiler is
      there, else numpy), ``"native"``, ``"numpy"``, ``"cuda"`` or ``"metal"`` (Apple GPUs
      through MLX; asked for by name only, see ``backends/metal/train.py``).
    - ``threads``: cores for word counting (default: all this process may use).
    - ``max_word_memory``: bytes of unique words before the native counter prunes rare ones
      (THE PRUNE RULE in kernels/host_train_words.h; default a quarter of the machine's memory).
      Pruning is warned about and recorded in ``gputok.train.last_stats`` (``exact=False``):
      only then may the merges differ from HF's.
    - ``progress``: a bar per phase on stderr, with rate and ETA; ``verbose``: one line per
      merge on stderr (the pair, its id and its count).

    >>> enc = gputok.train_bpe(["low lower lowest"] * 10, vocab_size=260, pattern="gpt2")
    >>> [enc.decode_single_token_bytes(i) for i in range(256, 260)]
    [b'lo', b'low', b' low', b' lowe']
    """
    global last_stats
    if not isinstance(vocab_size, (int, np.integer)) or isinstance(vocab_size, bool) \
            or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive int, got {vocab_size!r}")
    if not isinstance(min_frequency, (int, np.integer)) or min_frequency < 0:
        raise ValueError(f"min_frequency must be an int >= 0, got {min_frequency!r}")
    backends = _backend_names()
    if backend not in backends:
        raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(backends)}")
    if errors not in ("strict", "replace"):
        raise ValueError(f"errors must be 'strict' or 'replace', got {errors!r}")
    if isinstance(special_tokens, str):
        raise ValueError("special_tokens must be a list of strings, not one string")
    if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    if max_word_memory is not None and (not isinstance(max_word_memory, (int, np.integer))
                                        or max_word_memory < 1):
        raise ValueError(f"max_word_memory must be a positive int (bytes), got "
                         f"{max_word_memory!r}")
    pat = patterns.resolve(pattern)
    try:
        compile_pinned(pat, "hf")
    except Exception as e:
        raise ValueError(f"invalid pattern {pattern!r}: {e}") from None
    vocab = Vocab(list(special_tokens), id_order=id_order, specials_at=specials_at)
    backend_name, trainer = _merge_backend(backend)
    counter = _native_counter(pat) if backend_name != "numpy" else None

    if counter is not None:
        batches, total, unit = corpus_batches(corpus, field=field, errors=errors)
    else:
        texts, total, unit = corpus_texts(corpus, field=field, errors=errors)
    bars = Progress(progress, total, unit)
    log = MergeLog(vocab) if verbose else None
    try:
        t0 = time.perf_counter()
        if counter is not None:
            from . import native

            n_threads = threads or _threads_default()
            words = native.count_batches(batches, counter, threads=n_threads,
                                         budget=max_word_memory or default_word_memory(),
                                         on_progress=bars.words)
        else:
            words = WordCounts.from_counter(count_words(texts, pat, on_progress=bars.words))
        if not words.exact:
            warnings.warn(f"gputok train: the word table reached max_word_memory, so words seen "
                          f"at most {words.prune_floor} times were dropped ({words.pruned_words} "
                          f"words, {words.pruned_count} occurrences); the merges may differ "
                          f"from HF's. Raise max_word_memory for exact counts.", RuntimeWarning,
                          stacklevel=2)
        t1 = time.perf_counter()
        target = vocab.merge_target(vocab_size)
        bars.start_merges(len(words), max(target - len(vocab), 0))
        kw = {"on_merge": bars.merge if progress else None}
        if log is not None and backend_name in ("native", "numpy"):
            kw["on_log"] = log
        merges = trainer(words, vocab, vocab_size=target, min_frequency=int(min_frequency), **kw)
        if log is not None and "on_log" not in kw:  # (the device loops keep no counts)
            for a, b, c in merges:
                log(a, b, c, -1)
        t2 = time.perf_counter()
    except BaseException:
        bars.abandon()  # clear the bar, so an error message starts on a clean line
        raise
    bars.close(len(merges))
    vocab.finish()
    last_stats = TrainStats(backend=backend_name,
                            words_backend="native" if counter is not None else "python",
                            n_words=len(words), n_merges=len(merges), words_s=t1 - t0,
                            merges_s=t2 - t1, vocab_size=len(vocab), exact=words.exact,
                            prune_floor=words.prune_floor, pruned_words=words.pruned_words,
                            pruned_count=words.pruned_count)
    return build_encoding(name or f"bpe{len(vocab)}", pat, vocab, merges)


def train_spm_bpe(corpus, *, vocab_size: int = 8000, **options):
    """SentencePiece BPE training with ``spm_train --model_type=bpe``'s pieces, scores and ids
    (``gputok.train.spm``; the rules: ``cpu_ref/spm_train.py``). Returns an ``SpmTrained``:
    ``.pieces``, ``.save(path)`` writes the ``.model``.

    >>> m = gputok.train_spm_bpe(["low lower lowest"] * 5, vocab_size=24)
    >>> m.pieces[3]
    ('lo', -0.0, 1)
    """
    from . import native
    from .spm import train_spm_bpe as train

    ok, why = native.available()
    if not ok:
        raise RuntimeError(f"SentencePiece training needs the native library: {why}")
    return train(corpus, vocab_size=vocab_size, **options)


def _threads_default() -> int:
    from ..backends.native import threads_default

    return threads_default()


def _native_ok() -> bool:
    """Whether the native library can be had (a compiler; the library built, or buildable)."""
    from ..backends import FallbackWarning
    from ..backends.native.build import NativeBuildError
    from . import native

    ok, _why = native.available()
    if not ok:
        return False
    try:
        native.library()
    except NativeBuildError as e:
        warnings.warn(f"gputok train: the native library failed to build; training with numpy "
                      f"({e})", FallbackWarning, stacklevel=4)
        return False
    return True


def _native_counter(pat: str) -> "tuple | None":
    """The native pre-tokenizer's tables for ``pat``, or None (no native form, no library)."""
    from . import native

    params = native.pretok_params(pat)
    if params is None or not _native_ok():
        return None
    return params


def _backend_names() -> tuple:
    """What ``backend=`` accepts: the devices' trainers (``backends.devices``) and the CPU's
    two, native and numpy."""
    names = trainer_names()
    return names[:1] + ("native",) + tuple(n for n in names[1:] if n != "native")


def _merge_backend(backend: str):
    """(name, merge loop) for ``backend``: a device's training side (``backends.devices``:
    the one named, or for "auto" the first available of those it tries), else the CPU's:
    native where a C++ compiler is, else numpy."""
    from ..backends.devices import trainers

    for name, mod in trainers(backend):
        ok, why = mod.available()
        if ok:
            return name, functools.partial(_on_device, mod.train_arrays)
        if backend == name:
            raise RuntimeError(f"the {name} training backend is not available: {why}")
    if backend in ("auto", "native"):
        from . import native

        ok, why = native.available()
        if backend == "native" and not ok:
            raise RuntimeError(f"the native training backend is not available: {why}")
        if ok and (backend == "native" or _native_ok()):
            return "native", native.train_words
    from . import cpu

    return "numpy", cpu.train_words


def _on_device(train_arrays, words, vocab: Vocab, *, vocab_size: int, min_frequency: int,
               on_merge=None) -> list[tuple[int, int, int]]:
    """A device's merge loop over the words as arrays; out of device memory, the CPU's loop
    from the vocabulary as it was, with a warning."""
    from . import cpu

    ids, offsets, counts = cpu.word_arrays(words, vocab)
    snapshot = vocab.copy()
    try:
        return train_arrays(ids, offsets, counts, vocab, vocab_size=vocab_size,
                            min_frequency=min_frequency, on_merge=on_merge)
    except MemoryError as e:
        warnings.warn(f"gputok train: {e}; training on the CPU instead", RuntimeWarning,
                      stacklevel=2)
        vocab.restore(snapshot)
        return cpu.train_words(words, vocab, vocab_size=vocab_size,
                               min_frequency=min_frequency, on_merge=on_merge)


def build_encoding(name: str, pat: str, vocab: Vocab, merges: list[tuple[int, int, int]]):
    """An HF-rule ``Encoding``: merge priority = merge index, ids as trained, pre-tokenized as
    HF's Split(pattern, isolated) + ByteLevel (the same words the trainer counted)."""
    from ..encoding import Encoding
    from ..model import Model
    from ..stages.pretok import PretokSpec, Split

    merges = list(merges)
    model = Model(name=name, pretok=PretokSpec((Split(pat, keep_gaps=True),), family="hf"),
                  decoder=vocab.decoder(), byte_ids=vocab.byte_ids.astype(np.uint32),
                  merges=merges, specials=dict(vocab.special_tokens))
    enc = Encoding.from_model(model)
    enc.trained_merges = merges
    return enc
