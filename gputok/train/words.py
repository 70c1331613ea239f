"""The corpus input of training, and the Python word counter.

``corpus_texts`` and ``corpus_batches`` turn every accepted corpus form into texts (for the
Python counter below) or packed batches (for the native counter, ``native.py``).

A *word* is one piece of the pre-tokenizer (HF ``Split(pattern, behavior="isolated")``: the
matches and any unmatched gaps between them). Documents are read one batch at a time, split, and
counted into one ``Counter``; the corpus itself is never held in memory, only its vocabulary of
words (a few hundred thousand words for tens of MB of text, growing slowly after that).

The Python counter (patterns the native pre-tokenizer does not know, and the numpy backend).
Performance notes (20 MB, one core): the vectorised scanner (``gputok.stages.scan``, for the
patterns it knows) counts prose at ~10 MB/s, 2.5x ``regex.findall`` per document (~4 MB/s);
``Counter.update`` per document's piece list is a C loop and not worth replacing. Batches of
~1M characters keep the scanner's temporaries near 30 MB (4M: ~120 MB, and no faster). Tried
and dropped: counting batches in worker processes (ProcessPoolExecutor): no gain on 2 cores
(pickling batches and per-batch counters, and merging the counters, ate the parallel part),
and spawn/forkserver workers re-import the caller's ``__main__``, which breaks unguarded
user scripts.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from ..stages.pack import Documents, Packed, fix_surrogates
from ..stages.pretok import Pretokenizer, PretokSpec, Split


BATCH_BYTES = 2 << 20  # text per batch of the native counter (2 MB: see native.py)


def _is_pathlike(x) -> bool:
    return isinstance(x, os.PathLike)


def corpus_texts(corpus, *, field: str = "text", errors: str = "strict"
                 ) -> tuple[Iterator[tuple[str, int]], "int | None", str]:
    """Normalise the accepted corpus forms to an iterator of ``(text, progress_units)``, the total
    of those units when it is known cheaply, and their name: input bytes for files ("B"),
    documents otherwise ("doc").

    Accepted: an iterable (list, generator, ...) of str; a ``pathlib.Path`` or a list of them
    (.txt / .jsonl, optionally .gz, read with ``gputok.corpus``); a pyarrow string array.
    """
    if isinstance(corpus, (str, bytes)):
        raise ValueError("train_bpe got a single str/bytes as corpus; pass a list of texts, or "
                         "pathlib.Path(...) (or a list of Paths) for files")
    if _is_pathlike(corpus):
        corpus = [corpus]
    if isinstance(corpus, (list, tuple)) and corpus and all(map(_is_pathlike, corpus)):
        return _file_texts(list(corpus), field, errors)
    if type(corpus).__module__.startswith("pyarrow"):
        from ..stages.pack import Documents

        docs = Documents(corpus, errors=errors)
        return ((t, 1) for t in docs.iter_str()), len(docs), "doc"
    if isinstance(corpus, (list, tuple)):
        return _str_texts(corpus), len(corpus), "doc"
    try:
        it = iter(corpus)
    except TypeError:
        raise TypeError(f"train_bpe: corpus must be an iterable of str, Path(s) or a pyarrow "
                        f"string array, not {type(corpus).__name__}") from None
    return _str_texts(it), None, "doc"


def _str_texts(texts: Iterable) -> Iterator[tuple[str, int]]:
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            if _is_pathlike(t):
                raise ValueError(f"corpus item {i} is a path among texts; pass either texts or "
                                 "paths, not both")
            raise TypeError(f"corpus item {i} is a {type(t).__name__}, expected str")
        yield fix_surrogates(t), 1


def _check_paths(paths) -> None:
    from ..corpus import CorpusError

    for p in map(Path, paths):  # fail before any work, not halfway through the corpus
        if not p.exists():
            raise CorpusError(f"{p}: no such file")
        if p.is_dir():
            raise CorpusError(f"{p}: is a directory (pass the files, e.g. {p}/*.jsonl)")


def _file_texts(paths, field, errors):
    from ..corpus import iter_documents, total_input_bytes

    _check_paths(paths)

    def gen():
        for doc, consumed, _where in iter_documents(paths, field=field, errors=errors):
            yield ("" if doc is None else doc), consumed

    return gen(), total_input_bytes(paths), "B"


def corpus_batches(corpus, *, field: str = "text", errors: str = "strict",
                   batch_bytes: int = BATCH_BYTES
                   ) -> tuple[Iterator[tuple], "int | None", str]:
    """The corpus as packed batches for the native counter: an iterator of ``(buf, offsets,
    progress_units)`` (documents ``buf[offsets[d]:offsets[d + 1]]``, valid UTF-8), the total of
    the units when known and their name, as ``corpus_texts``. Files are read by the corpus
    readers (``gputok.corpus.read_batches``, the native JSON-lines reader where it applies);
    texts are packed about ``batch_bytes`` at a time."""
    if isinstance(corpus, (str, bytes)):
        corpus_texts(corpus)  # raises the same error
    if _is_pathlike(corpus):
        corpus = [corpus]
    if isinstance(corpus, (list, tuple)) and corpus and all(map(_is_pathlike, corpus)):
        from ..corpus import read_batches, resolve_inputs, total_input_bytes

        _check_paths(corpus)
        sources = resolve_inputs(list(corpus), field=field)  # (a Source passes as it is)

        def gen():
            for batch in read_batches(sources, field=field, errors=errors,
                                      batch_bytes=batch_bytes, packed=True):
                if isinstance(batch.texts, Packed):
                    yield batch.texts.buf, batch.texts.offsets, batch.progress
                else:  # an Arrow column
                    buf, off = Documents(batch.texts, errors=errors).packed()
                    yield buf, off, batch.progress

        return gen(), total_input_bytes(corpus), "B"
    texts, total, unit = corpus_texts(corpus, field=field, errors=errors)

    def packed():
        batch: list[str] = []
        units = size = 0
        for text, n in texts:
            batch.append(text)
            units += n
            size += len(text)
            if size >= batch_bytes:
                buf, off = Documents(batch).packed()
                yield buf, off, units
                batch, units, size = [], 0, 0
        if batch or units:
            buf, off = Documents(batch).packed() if batch else (b"", np.zeros(1, np.int64))
            yield buf, off, units

    return packed(), total, unit


def batch_splitter(pattern: str) -> Callable[[list[str]], Iterable[list[str]]]:
    """The pre-tokenizer stage on a batch of texts, as HF's trainer splits words:
    ``Split(pattern, behavior="isolated")`` with HF's (Oniguruma's) Unicode tables; the
    vectorised scanner when it knows the pattern, else the regex, gaps kept as words."""
    return Pretokenizer(PretokSpec((Split(pattern, keep_gaps=True),), family="hf")).split_batch


def count_words(texts: Iterable[tuple[str, int]], pattern: str, *,
                on_progress: "Callable[[int, int], None] | None" = None,
                batch_chars: int = 1 << 20) -> Counter:
    """Count the words of every text, a batch of about ``batch_chars`` characters at a time.
    ``on_progress(input_units, n_unique_words)`` is called after every batch."""
    split_batch = batch_splitter(pattern)
    words: Counter = Counter()
    update = words.update
    batch: list[str] = []
    units = chars = 0

    def flush():
        nonlocal batch, units, chars
        for pieces in split_batch(batch):
            update(pieces)
        if on_progress is not None:
            on_progress(units, len(words))
        batch, units, chars = [], 0, 0

    for text, n in texts:
        if text:
            batch.append(text)
            chars += len(text)
        units += n
        if chars >= batch_chars:
            flush()
    flush()
    return words
