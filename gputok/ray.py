"""Ray Data adapter: tokenize a ``ray.data.Dataset`` across many machines.

``Tokenizer`` is the actor: it loads the vocabulary once per actor, takes Arrow batches (the text
column read through Arrow's buffers), and returns them with a ``large_list<int32>`` column of
ids built without copying (``gputok.corpus.formats.arrow.to_arrow``). ``tokenize`` wires it into
``map_batches`` with an ``ActorPoolStrategy``; on a GPU cluster pass ``num_gpus=1`` and each
actor drives one GPU with the ``auto`` backend. Ids are those of a single process (encoding is
per document) and so is row order (``preserve_order``, on by default).

>>> import ray, gputok.ray
>>> ds = ray.data.from_items([{"text": "hello world"}])                     # doctest: +SKIP
>>> gputok.ray.tokenize(ds, "cl100k_base").take_all()[0]["input_ids"]      # doctest: +SKIP
[15339, 1917]
"""

from __future__ import annotations


class Tokenizer:
    """A Ray Data actor class: ``Tokenizer(encoding)(batch: pyarrow.Table) -> pyarrow.Table``.

    ``encoding`` is a named encoding or a path gputok can load (it must exist on every node).
    ``keep_text=False`` drops the text column from the output.

    >>> t = Tokenizer("cl100k_base")
    >>> import pyarrow as pa
    >>> t(pa.table({"text": ["hello world"]})).column("input_ids").to_pylist()
    [[15339, 1917]]
    """

    def __init__(self, encoding: str = "cl100k_base", *, text_column: str = "text",
                 output_column: str = "input_ids", backend: str = "auto",
                 allowed_special=frozenset(), disallowed_special="all", append_eot: bool = False,
                 keep_text: bool = True):
        import os

        import gputok

        from .corpus.formats.arrow import to_arrow

        self.enc = gputok.load(encoding) if os.path.exists(str(encoding)) \
            else gputok.get_encoding(encoding)
        self.text_column, self.output_column = text_column, output_column
        self.kw = {"allowed_special": allowed_special, "disallowed_special": disallowed_special,
                   "backend": backend}
        self.eot = self.enc.eot_token if append_eot else None
        self.keep_text = keep_text
        self._to_arrow = to_arrow

    def __call__(self, batch):
        import pyarrow as pa

        from .corpus import append_eot

        if isinstance(batch, dict):  # batch_format="numpy"/"default" callers
            batch = pa.table({k: pa.array(v) for k, v in batch.items()})
        col = batch.column(self.text_column)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        ids, offsets = self.enc.encode_batch_arrays(col, **self.kw)
        if self.eot is not None:
            ids, offsets = append_eot(ids, offsets, self.eot)
        if not self.keep_text:
            batch = batch.drop_columns([self.text_column])
        return batch.append_column(self.output_column, self._to_arrow(ids, offsets))


def actor_cpus(actors: int, cluster_cpus: float) -> float:
    """CPUs each actor asks Ray for: 1, but never so many that the pool holds every CPU of the
    cluster. The dataset's other tasks (listing and reading files, ``from_items`` blocks) need
    a CPU too, and a pool that holds them all waits forever for blocks nobody can read (two
    actors on ``ray.init(num_cpus=2)`` did). An actor's encoder uses the node's cores whatever
    it asks for (the native backend runs a thread per core), so the number is Ray's
    bookkeeping, not the actor's speed.

    >>> actor_cpus(2, 2), actor_cpus(16, 64), actor_cpus(4, 1)
    (0.5, 1.0, 0.125)
    """
    room = cluster_cpus - 1 if cluster_cpus >= 2 else cluster_cpus / 2
    return min(1.0, room / actors)


def _cluster_cpus() -> float:
    import os

    import ray

    if ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 1))
    return float(os.cpu_count() or 1)  # what Ray Data's own ray.init() will give this machine


def tokenize(ds, encoding: str = "cl100k_base", *, actors: int = 2, num_gpus: float = 0,
             num_cpus: "float | None" = None, batch_size: int = 4096,
             preserve_order: bool = True, **tokenizer_kwargs):
    """``ds.map_batches`` with a pool of ``actors`` ``Tokenizer`` actors (Arrow in, Arrow out).

    ``num_gpus=1`` on GPU clusters gives each actor a GPU. ``num_cpus``: CPUs each actor asks
    for (default ``actor_cpus``: 1, less when the pool would otherwise hold every CPU and
    starve the reads). Extra keyword arguments go to ``Tokenizer`` (``text_column``,
    ``backend``, ``append_eot``, ...). Ray Data emits blocks as they finish unless told
    otherwise; ``preserve_order=True`` (the default) sets the dataset's
    ``execution_options.preserve_order`` so rows come out in input order, as from one process
    (``False`` lets a slow block not hold back the others).

    >>> out = tokenize(ray.data.read_parquet("s3://corpus/"), "o200k_base", actors=8,
    ...                num_gpus=1)                                          # doctest: +SKIP
    """
    try:
        from ray.data import ActorPoolStrategy
    except ImportError:
        raise ImportError("gputok.ray needs Ray Data: pip install 'gputok[ray]'") from None
    if actors < 1:
        raise ValueError(f"actors must be >= 1, got {actors}")
    if num_cpus is None:
        num_cpus = actor_cpus(actors, _cluster_cpus())
    out = ds.map_batches(Tokenizer, fn_constructor_args=(encoding,),
                         fn_constructor_kwargs=tokenizer_kwargs, batch_format="pyarrow",
                         batch_size=batch_size, compute=ActorPoolStrategy(size=actors),
                         num_cpus=num_cpus, num_gpus=num_gpus, zero_copy_batch=True)
    if preserve_order:
        out.context.execution_options.preserve_order = True
    return out
