"""Training byte-level BPE vocabularies, with HF ``BpeTrainer``'s exact rule (stated in
``cpu_ref.train``).

Two phases:

1. **Words** (``words.py``): the corpus is streamed through the pre-tokenizer stage and unique
   words are counted; memory holds the words, not the corpus.
2. **Merges**: on the CPU (``cpu.py``, backend ``"numpy"``) HF's incremental loop with a lazy
   max-heap; on a device (``backends/<device>/train.py``, registered in ``backends/devices.py``:
   ``"cuda"``, ``"metal"``) the words live on the device as linked symbol arrays, pair counts in
   a device hash table, and every merge step (best pair, find, count updates, rewrite) runs as
   kernels (``kernels/train_bpe.cu``, ``shaders/train_*.metal``).

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
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

from .. import patterns
from ..backends.devices import trainer_names
from ..unicode import compile_pinned

from .vocab import Vocab
from .words import corpus_texts, count_words

__all__ = ["train_bpe", "TrainStats"]



@dataclass
class TrainStats:
    """What the last ``train_bpe`` call did (``gputok.train.last_stats``)."""

    backend: str = ""
    n_words: int = 0  # unique words
    n_merges: int = 0
    words_s: float = 0.0
    merges_s: float = 0.0
    vocab_size: int = 0


last_stats = TrainStats()


def train_bpe(corpus, *, vocab_size: int, pattern: str = "cl100k", special_tokens=(),
              min_frequency: int = 2, backend: str = "auto", name: "str | None" = None,
              progress: bool = False, field: str = "text", errors: str = "strict"):
    """Train a byte-level BPE vocabulary exactly as HF ``tokenizers``' ``BpeTrainer`` does
    (behind ``Split(pattern, "isolated")`` + ``ByteLevel``, with all 256 bytes in the alphabet).

    - ``corpus``: an iterable of str, a list of str, a ``pathlib.Path`` or list of Paths
      (.txt / .jsonl, optionally .gz; ``field`` names the JSON field, ``errors`` says what to do
      with invalid UTF-8), or a pyarrow string array.
    - ``vocab_size``: the final number of ids, special tokens and the 256 bytes included.
    - ``pattern``: the pre-tokenizer regex, or ``gpt2`` / ``cl100k`` / ``o200k``.
    - ``special_tokens``: their ids are 0, 1, ... in order; training text containing them is
      ordinary text (as in HF).
    - ``min_frequency``: stop when the best pair occurs fewer times (HF's ``BpeTrainer``
      defaults to 0, which acts as 1; ``ByteLevelBPETokenizer.train`` and gputok to 2).
    - ``backend``: ``"auto"`` (CUDA when CuPy sees a GPU, else numpy), ``"numpy"``, ``"cuda"`` or
      ``"metal"`` (Apple GPUs through MLX; asked for by name only, see ``backends/metal/train.py``).

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
    backends = trainer_names()
    if backend not in backends:
        raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(backends)}")
    if errors not in ("strict", "replace"):
        raise ValueError(f"errors must be 'strict' or 'replace', got {errors!r}")
    if isinstance(special_tokens, str):
        raise ValueError("special_tokens must be a list of strings, not one string")
    pat = patterns.resolve(pattern)
    try:
        compile_pinned(pat, "hf")
    except Exception as e:
        raise ValueError(f"invalid pattern {pattern!r}: {e}") from None
    vocab = Vocab(list(special_tokens))
    backend_name, trainer = _merge_backend(backend)

    texts, total, unit = corpus_texts(corpus, field=field, errors=errors)
    bars = _Progress(progress, total, unit)
    try:
        t0 = time.perf_counter()
        words = count_words(texts, pat, on_progress=bars.words)
        t1 = time.perf_counter()
        bars.start_merges(len(words), max(vocab_size - len(vocab), 0))
        merges = trainer(words, vocab, vocab_size=int(vocab_size),
                         min_frequency=int(min_frequency),
                         on_merge=bars.merge if progress else None)
        t2 = time.perf_counter()
    except BaseException:
        bars.abandon()  # clear the bar, so an error message starts on a clean line
        raise
    bars.close(len(merges))
    last_stats = TrainStats(backend=backend_name, n_words=len(words),
                            n_merges=len(merges), words_s=t1 - t0, merges_s=t2 - t1,
                            vocab_size=len(vocab))
    return build_encoding(name or f"bpe{len(vocab)}", pat, vocab, merges)


def _merge_backend(backend: str):
    """(name, merge loop) for ``backend``: a device's training side (``backends.devices``:
    the one named, or for "auto" the first available of those it tries), else the CPU's."""
    from ..backends.devices import trainers

    for name, mod in trainers(backend):
        ok, why = mod.available()
        if ok:
            return name, functools.partial(_on_device, mod.train_arrays)
        if backend == name:
            raise RuntimeError(f"the {name} training backend is not available: {why}")
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


class _Progress:
    """Two tqdm bars on stderr: words counted (bytes or documents), then merges done."""

    def __init__(self, enabled: bool, total: "int | None", unit: str):
        self.enabled = bool(enabled)
        self.bar = None
        if self.enabled:
            from tqdm import tqdm

            self._tqdm = tqdm
            self.bar = tqdm(total=total, unit=unit, unit_scale=unit == "B", desc="words",
                            file=sys.stderr, dynamic_ncols=True)

    def words(self, units: int, n_unique: int) -> None:
        if self.bar is not None:
            self.bar.update(units)
            self.bar.set_postfix(unique=n_unique, refresh=False)

    def start_merges(self, n_words: int, n_target: int) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = self._tqdm(total=n_target, unit="merge", desc="merges", file=sys.stderr,
                                  dynamic_ncols=True, mininterval=0.25)
            self._done = 0

    def merge(self, done: int) -> None:
        if self.bar is not None and done - self._done >= 64:
            self.bar.update(done - self._done)
            self._done = done

    def abandon(self) -> None:
        if self.bar is not None:
            self.bar.leave = False
            self.bar.close()

    def close(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self._done)
            self.bar.close()
