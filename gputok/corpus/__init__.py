"""The corpus job: files of text in, training shards out (``gputok encode``), and the corpus as
documents for training (``gputok train``).

One direction, one module per step; each module imports only the steps before it (and
``sources``, the vocabulary they share), and ``job`` runs them in order::

    sources     what an input is (Source, CorpusError, positions), how its bytes are opened
    inputs      every input expanded and checked before any work (dataset folders, globs)
    text        readers: .txt and JSON lines in Python (the reference), one document at a time
    jsonl         the native JSON-lines reader (the native library's host routine)
    arrow         Parquet and Arrow IPC string columns
    batches     the readers' documents cut into batches, with the position after each
    documents   (training) the readers' documents one at a time, no batches
    pool        the encoder pool: batches encoded in order, in this process or worker processes
    manifest    manifest.json and its journal (a line per finished shard)
    shards      the writer: capped shards, atomic, checksummed, in the manifest; exact resume
    formats/      one class per output format (npy, nanogpt, megatron, datatrove, parquet, arrow)
    lifetime    a job's processes live and die together; the output lock names its owner
    job         ``encode_corpus``: the steps above, in order

It talks to the engine only through ``gputok.backends``' public functions (``get_backend``,
``is_gpu``, ``device_count``, ``device_available``, ``host_routine``, ``huge_block``,
``build_seconds``) and to the tokenizer through ``Encoding``'s batch API.

>>> from gputok.corpus import encode_corpus, read_shards
>>> s = encode_corpus(["sample/austen.jsonl"], "out/austen", encoding="r50k_base",
...                   overwrite=True)                                      # doctest: +SKIP
"""

# public API
from .batches import Batch, read_batches
from .documents import iter_documents
from .inputs import KINDS, dataset_files, resolve_inputs, total_input_bytes
from .job import Interrupted, JobSummary, encode_corpus
from .pool import append_eot, plan_workers
from .manifest import read_manifest
from .shards import ShardWriteError, ShardWriter, read_shards
from .sources import CorpusError, Source, location

__all__ = ["Batch", "CorpusError", "Interrupted", "JobSummary", "KINDS", "ShardWriteError",
           "ShardWriter", "Source", "append_eot", "dataset_files", "encode_corpus",
           "iter_documents", "location", "plan_workers", "read_batches", "read_manifest",
           "read_shards", "resolve_inputs", "total_input_bytes"]
