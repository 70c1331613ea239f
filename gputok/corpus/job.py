"""``encode_corpus``, what ``gputok encode`` runs: the corpus job's steps in their order.

    inputs (checked) -> readers -> batches -> encoder pool -> shard writer (a format)

1. everything that can be wrong is checked before the first document is encoded: every input
   exists, is readable and of a known kind (``inputs.resolve_inputs``), the output format
   fits the vocabulary, the output directory is writable (the manifest is written first), an
   end-of-text id exists when one is needed;
2. batches are encoded in input order, by this process or by a pool (``pool.Pool``), and handed
   to the shard writer with the input position after each document;
3. on an error or Ctrl-C, the documents already encoded are written as a last shard before the
   error is reported, so ``--resume`` loses no work.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..backends import build_seconds, get_backend, is_gpu
from ..specials import shell_quote as _shell_quote
from .batches import read_batches
from .formats import get_format
from .inputs import resolve_inputs
from .pool import Pool, SpecialInBatch, check_backends, plan_workers
from .shards import ShardWriter
from .sources import CorpusError, location


class Interrupted(Exception):
    """Ctrl-C / SIGTERM during a job; the message says what was kept."""


@dataclass
class JobSummary:
    docs: int = 0
    bytes: int = 0
    tokens: int = 0
    seconds: float = 0.0
    shards: int = 0
    resumed_docs: int = 0
    backends: tuple = ()
    workers: int = 1
    build_seconds: float = 0.0  # building device code first (the CPU kernels, once), not in seconds


def encode_corpus(inputs, output, *, encoding="cl100k_base", fmt: str = "npy",
                  field: str = "text", input_format: str = "auto", errors: str = "strict",
                  allowed_special=frozenset(), special_as_text: bool = False,
                  append_eot: bool = False, add_special_tokens: bool = False,
                  batch_bytes: int = 8 << 20,
                  shard_tokens: "int | None" = 1 << 24, shard_bytes: "int | None" = None,
                  resume: bool = False, overwrite: bool = False, backend: str = "auto",
                  checksum: str = "auto",
                  devices=None, workers="auto", include=(), exclude=(), progress=None,
                  on_start=None, warn=None) -> JobSummary:
    """Encode files into shards of ``fmt`` under ``output``; resumable, see ``shards``.

    ``encoding``: a named encoding, a path (``tokenizer.json``, ``.tiktoken``) or an
    ``Encoding``. ``add_special_tokens``: each document gets what the tokenizer's library adds
    (``Encoding.encode``), before ``append_eot``. ``include`` / ``exclude``: globs choosing the
    files of directory inputs (``resolve_inputs``). ``on_start(total_input_bytes)`` is called
    once the inputs are checked and the output is ready, before the first batch (0 for
    standard input); ``checksum``: the shards' (``corpus.checksum``: ``auto`` is xxh64
    where the native library is built, else sha256); ``progress(input_bytes, docs, tokens)``
    after every batch; ``warn(line)`` gets notes such as the files of a directory that were
    skipped (default: stderr).

    >>> s = encode_corpus(["sample/austen.jsonl"], "out/austen", encoding="r50k_base",
    ...                   fmt="megatron", overwrite=True)                    # doctest: +SKIP
    >>> s.docs
    275
    """
    import gputok

    built_before = build_seconds()
    if errors not in ("strict", "replace"):
        raise ValueError(f"errors must be 'strict' or 'replace', got {errors!r}")
    if batch_bytes < 1:
        raise ValueError(f"batch_bytes must be >= 1, got {batch_bytes}")
    sources = resolve_inputs(inputs, field=field, input_format=input_format, include=include,
                             exclude=exclude, skip_dir=output, note=warn or _note)
    if resume and overwrite:
        raise ValueError("--resume continues the job in the output directory and --overwrite "
                         "deletes it: pass one of them")
    if resume and any(s.path == "-" for s in sources):
        raise ValueError("-: standard input cannot be resumed (its documents are gone); "
                         "write it to a file first")
    if isinstance(encoding, gputok.Encoding):
        enc, spec = encoding, ("obj", encoding)
    elif os.path.exists(str(encoding)):
        enc, spec = gputok.load(encoding), ("path", str(encoding))
    else:
        enc, spec = gputok.get_encoding(encoding), ("name", encoding)
    form = get_format(fmt)
    form.dtype(enc.n_vocab)  # refuses a vocabulary the format cannot store, before any work
    eot = None
    if append_eot or form.requires_eot:
        try:
            eot = enc.eot_token
        except KeyError:
            raise ValueError(f"{'--format ' + fmt if form.requires_eot else '--append-eot'} "
                             f"needs an end-of-text token, and {enc.name} has none") from None
    if allowed_special == "all":
        allowed = "all"
    else:
        allowed = frozenset(allowed_special)
        unknown = sorted(allowed - enc.special_tokens_set)
        if unknown:
            raise ValueError(f"--allowed-special {_shell_quote(unknown[0])}: {enc.name} has no "
                             f"such special token (it has: "
                             f"{', '.join(sorted(enc.special_tokens_set)[:6])})")
    opts = {"allowed": allowed, "disallowed": () if special_as_text else "all",
            "errors": errors, "eot": eot, "add_special_tokens": bool(add_special_tokens)}
    meta = {"encoding": enc.name, "inputs": [{"path": s.path, "bytes": s.size} for s in sources],
            "field": field, "input_format": input_format, "errors": errors,
            "append_eot": eot is not None, "eot": eot,
            "allowed_special": "all" if allowed == "all" else sorted(allowed),
            "special_as_text": bool(special_as_text)}
    if add_special_tokens:  # (only when on: manifests written before the option still resume)
        meta["add_special_tokens"] = True
    total = sum(s.size for s in sources)
    if backend == "auto" and devices is None:
        backend = get_backend("auto").name  # resolved once here; the summary says which
    backends = plan_workers(backend, devices=devices, workers=workers,
                            total_bytes=total if all(s.path != "-" for s in sources) else None)
    check_backends(backends)
    if len(backends) == 1:  # its tables map while the output is set up and the input read
        get_backend(backends[0]).prepare_ahead(enc.model)
    if spec[0] == "obj" and any(map(is_gpu, backends[1:2])) and not Pool.device_threads(backends):
        # GPU worker processes are spawned and receive the encoding pickled (CPU workers are
        # forked; one thread per GPU shares this process's encoding)
        import pickle

        try:
            pickle.dumps(encoding)
        except Exception:
            raise ValueError("several workers need the encoding by name or by path (each "
                             "process loads it); this Encoding object cannot be sent") from None
    writer = ShardWriter(output, fmt=form, meta=meta, n_vocab=enc.n_vocab,
                         cap_tokens=shard_tokens, cap_bytes=shard_bytes, resume=resume,
                         overwrite=overwrite, describe=lambda e: location(sources, e), warn=warn,
                         checksum=checksum)
    summary = JobSummary(resumed_docs=writer.docs_done, backends=tuple(backends),
                         workers=len(backends), build_seconds=build_seconds() - built_before)
    if writer.complete:
        writer.release()
        summary.shards = len(writer.shards)
        return summary
    start = writer.start
    pool = Pool(enc, spec, backends, opts)
    t0 = time.perf_counter()
    if on_start is not None:
        on_start(total)
    if progress is not None and start is not None:
        progress(sum(s.size for s in sources[:start[0]]), 0, 0)
    try:
        for batch, ids, offsets in pool.map(read_batches(sources, field=field, errors=errors,
                                                         batch_bytes=batch_bytes, start=start,
                                                         packed=True)):
            if len(batch):
                writer.add(ids, offsets, batch.ends)
            summary.docs += len(batch)
            summary.bytes += batch.nbytes
            summary.tokens += len(ids)
            if progress is not None:
                progress(batch.progress, summary.docs, summary.tokens)
            batch = ids = offsets = None  # freed before the next batch is encoded
    except SpecialInBatch as e:
        _flush_quietly(writer)
        writer.release()
        raise ValueError(f"{location(sources, e.batch.ends[e.doc])}: the text contains the special "
                         f"token {e.token!r}; pass --special-as-text to encode it as plain text, "
                         f"or --allowed-special {_shell_quote(e.token)} to encode it as the "
                         f"control token. {writer.kept()}") from None
    except KeyboardInterrupt:
        _flush_quietly(writer)
        writer.release()
        raise Interrupted(writer.kept()) from None
    except CorpusError as e:  # bad input halfway: say what the output holds now
        _flush_quietly(writer)
        writer.release()
        raise CorpusError(f"{e}. {writer.kept()[0].upper()}{writer.kept()[1:]}") from None
    except BaseException:
        _flush_quietly(writer)
        writer.release()
        raise
    finally:
        import sys

        pool.close(now=sys.exc_info()[0] is not None)
    writer.close()
    summary.seconds = time.perf_counter() - t0
    summary.shards = len(writer.shards)
    return summary


def _note(line: str) -> None:
    import sys

    print(f"gputok: {line}", file=sys.stderr)


def _flush_quietly(writer: ShardWriter) -> None:
    try:
        writer.flush()
    except Exception:  # the original error matters more; the manifest is consistent either way
        pass
