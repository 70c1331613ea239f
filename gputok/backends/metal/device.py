"""The Metal device adapter: the driver's device protocol (``protocol.py``) over MLX arrays, each
CUDA kernel the driver names run as its Metal form (a shader of ``shaders/encode_*.metal``, or
an MLX operation for the whole-array steps). ``__init__.py`` has the why of its shape.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ...stages.merge import HUGE_PIECE, LONG_PIECE
from ...unicode import FORMS
from ..protocol import DEVICE_FAMILIES, Capabilities, Device
from .arrays import PAD, MetalArray, _mx_dtype, _oom_as_memory_error, _Pending
from .spm import SpmMetalSteps


def gpu_name() -> str:
    """The Metal GPU's name as MLX reports it (``mx.device_info()``), with its memory.

    >>> gpu_name()  # on a Mac
    'Apple M2 Max, 32 GiB unified memory'
    """
    import mlx.core as mx

    try:
        info = _device_info(mx)
    except Exception as e:
        return f"unknown ({type(e).__name__}: {e})"
    name = info.get("device_name") or info.get("architecture") or "Apple GPU"
    mem = info.get("memory_size")
    return f"{name}, {int(mem) >> 30} GiB unified memory" if mem else str(name)


def _device_info(mx) -> dict:
    # mx.device_info() from MLX 0.30 on; mx.metal.device_info() before (deprecated since)
    fn = getattr(mx, "device_info", None) or mx.metal.device_info
    return dict(fn())


def _check_dedup(dedup: bool) -> bool:
    if dedup:
        raise ValueError("dedup=True is not available on the metal backend: the piece dedup "
                         "claims hash slots with a 64-bit compare-and-swap, which Metal lacks "
                         "(32-bit atomics only); use dedup=False (the default)")
    return False


class MetalDevice(SpmMetalSteps, Device):
    """The device adapter on MLX (``protocol.py`` documents the protocol).

    ``factory``: a ``kernels.KernelFactory`` (MLX's by default; the tests pass one
    whose ``make`` is the emulator). ``block``: threads per threadgroup; ``max_blocks``:
    threadgroups per grid-stride launch; ``memory_limit``: bytes the driver plans chunks for
    (default: half of MLX's recommended working set on a Mac).

    >>> DeviceBackend(MetalDevice(), name="metal").plan(gputok.get_encoding("r50k_base").model)
    {'split': 'host', 'normalize': 'none', 'pretok': 'device (metal (Apple M2 Max, ...))', ...}
    """

    kind = "metal"

    def __init__(self, *, factory=None, block: int = 256, max_blocks: int = 1024,
                 memory_limit: "int | None" = None, name: "str | None" = None):
        import mlx.core as mx

        from .kernels import KernelFactory

        self.mx = mx
        self.factory = factory if factory is not None else KernelFactory()
        self.block, self.max_blocks = int(block), int(max_blocks)
        self.scan_block, self.scan_items = 256, 8  # (the driver's scans run as MLX ops here)
        self.memory_limit = memory_limit
        self.name = name or (f"metal ({gpu_name()})" if factory is None else "metal (custom)")
        self.oom_errors = (MemoryError,)  # MetalOutOfMemory included
        self.launches: dict = {}  # the driver's kernel launches, by name
        self.shaders_run: dict = {}  # the shaders dispatched, by name (a step may need none)
        # what shaders/encode_{pretok,o200k,nfc}_*.metal cover: every scanner family and normal
        # form the CUDA kernels do (one the CUDA kernels gain later runs on the host here,
        # counted); a Metal form of every kernel with a ``_k_`` step below; no piece dedup
        self._longest_of = None  # (pstart's array, its chunk's longest entry): _longest
        self.caps = Capabilities(own_scan=True, pretok_families=DEVICE_FAMILIES,
                                 normal_forms=FORMS, kernels=frozenset(_STEPS), dedup=False)

    # ---- memory ------------------------------------------------------------------------------

    def _wrap(self, host: np.ndarray) -> MetalArray:
        host = np.ascontiguousarray(host).reshape(-1)
        n = len(host)
        if n < PAD:
            host = np.concatenate([host, np.zeros(PAD - n, host.dtype)])
        return MetalArray(self.mx.array(host), n, host.dtype)

    def empty(self, n, dtype) -> MetalArray:
        return MetalArray(None, int(n), dtype)

    def zeros(self, n, dtype) -> MetalArray:
        return MetalArray(None, int(n), dtype)

    def full(self, n, value, dtype) -> MetalArray:
        n = int(n)
        a = self.mx.full((max(n, PAD),), value, dtype=_mx_dtype(dtype))
        return MetalArray(a, n, dtype)

    def dummy(self, dtype) -> MetalArray:
        return MetalArray(None, PAD, dtype)

    def put(self, host) -> MetalArray:
        return self._wrap(np.asarray(host))

    def upload(self, arrays: list) -> list:
        return [self._wrap(np.asarray(a)) for a in arrays]

    def download(self, key, arr: MetalArray, count) -> _Pending:
        return _Pending(arr, int(count))

    def memory_budget(self) -> int:
        if self.memory_limit is not None:
            return int(self.memory_limit)
        try:
            info = _device_info(self.mx)
            return int(info.get("max_recommended_working_set_size") or info["memory_size"]) // 2
        except Exception:
            return 8 << 30

    def begin_chunk(self, nbytes: int = 0) -> None:
        pass

    def release(self) -> None:
        with contextlib.suppress(Exception):
            self.mx.clear_cache()

    def synchronize(self) -> None:
        self.mx.synchronize()

    @contextlib.contextmanager
    def stream(self, slot: int):
        yield

    def mark(self):
        self.mx.synchronize()
        return time.perf_counter()

    def elapsed_ms(self, a, b) -> float:
        return (b - a) * 1e3

    # ---- scans (MLX operations) --------------------------------------------------------------

    def scan(self, arr: MetalArray, n: int, exclusive: bool) -> None:
        """In-place prefix sum of ``arr[:n]`` with MLX's own scan."""
        with _oom_as_memory_error():
            self._scan(arr, n, exclusive)

    def _scan(self, arr: MetalArray, n: int, exclusive: bool) -> None:
        mx = self.mx
        x = arr.a
        s = mx.cumsum(x[:n], inclusive=not exclusive)
        arr.a = mx.concatenate([s.astype(x.dtype), x[n:]]) if n < x.shape[0] else s
        self._queue(arr.a)

    # ---- launches ----------------------------------------------------------------------------

    def _queue(self, *arrays) -> None:
        self.mx.async_eval(*arrays)

    def _run(self, shader: str, grid, block, inputs, shapes, init_value=None) -> list:
        self.shaders_run[shader] = self.shaders_run.get(shader, 0) + 1
        k = self.factory(shader)
        ins = []
        for x, (name, dt, ndim) in zip(inputs, k.shader.interface.inputs):
            if ndim == 0:
                if isinstance(x, MetalArray):  # a device value (the entry count): no host sync
                    ins.append(x.a[0].astype(_mx_dtype(dt)))
                else:
                    ins.append(self.mx.array(int(x), dtype=_mx_dtype(dt)))
            else:
                ins.append(x.a)
        threads = int(grid[0]) * int(block[0])
        outs = k(*ins, output_shapes=[(s,) for s in shapes], grid=threads,
                 init_value=init_value, threadgroup=int(block[0]))
        self._queue(*outs)
        return outs

    def launch(self, name, grid, block, args) -> None:
        """Run the Metal form of the CUDA kernel ``name`` called with CUDA's ``args``."""
        step = _STEPS.get(name) if self.has_kernel(name) else None
        if step is None:
            raise KeyError(f"the metal backend has no form of kernel {name!r} "
                           "(gputok/backends/metal/device.py)")
        self.launches[name] = self.launches.get(name, 0) + 1
        with _oom_as_memory_error():
            step(self, tuple(grid), tuple(block), list(args))

    # Each _k_<kernel> takes the arguments of kernels/encode_*.cu's kernel of that name.

    def _k_encode_pretok_marks(self, g, b, args) -> None:
        pos, bits, count, mark = args
        c = int(count)
        x = mark.a
        x[pos.a[:c]] = bits.a[:c]
        mark.a = x
        self._queue(x)

    def _k_encode_pretok_classify(self, g, b, args) -> None:
        buf, n, mark, cls_table, cls = args
        (cls.a,) = self._run("encode_pretok_classify", g, b, [buf, mark, cls_table, n],
                             [cls.size])

    def _k_encode_pretok_spans(self, g, b, args) -> None:
        buf, n, mark, cls, letters, n_letters, gpt2, digit_group, end_whole, ent = args
        (ent.a,) = self._run("encode_pretok_spans", g, b,
                             [buf, mark, cls, letters, n, n_letters, gpt2, digit_group,
                              end_whole], [ent.size])

    def _k_encode_o200k_classify(self, g, b, args) -> None:
        buf, n, mark, cls_table, cls = args
        (cls.a,) = self._run("encode_o200k_classify", g, b, [buf, mark, cls_table, n],
                             [cls.size])

    def _k_encode_o200k_spans(self, g, b, args) -> None:
        buf, n, mark, cls, letters, n_letters, ent = args
        (ent.a,) = self._run("encode_o200k_spans", g, b, [buf, mark, cls, letters, n, n_letters],
                             [ent.size])

    def _k_encode_nfc_flags(self, g, b, args) -> None:
        (args[3].a,) = self._run("encode_nfc_flags", g, b, [args[0], args[2], args[1]],
                                 [args[3].size])  # buf, n, bits, flag

    def _k_encode_nfc_compact(self, g, b, args) -> None:
        (args[2].a,) = self._run("encode_nfc_compact", g, b, args[:2], [args[2].size])

    def _k_encode_entries_compact(self, g, b, args) -> None:
        scan, n, pstart, spec = args
        pstart.a, spec.a = self._run("encode_entries_compact", g, b, [scan, n],
                                     [pstart.size, spec.size])

    def _k_encode_entries_specials(self, g, b, args) -> None:
        scan, sp_pos, sp_id, count, spec = args
        c = int(count)
        x = spec.a
        x[scan.a[sp_pos.a[:c]]] = sp_id.a[:c]
        spec.a = x
        self._queue(x)

    def _gather(self, src: MetalArray, idx: MetalArray, k: int, out: MetalArray, dtype=None):
        mx = self.mx
        got = mx.take(src.a, idx.a[:k])
        if dtype is not None:
            got = got.astype(_mx_dtype(dtype))
        if out.size > k:
            got = mx.concatenate([got, mx.zeros((out.size - k,), dtype=got.dtype)])
        out.a = got
        self._queue(got)

    def _k_encode_doc_entries(self, g, b, args) -> None:
        scan, doc_off, n_docs1, doc_entry = args
        self._gather(scan, doc_off, int(n_docs1), doc_entry)

    def _k_encode_doc_offsets(self, g, b, args) -> None:
        doc_entry, count, n_docs1, out_doc = args
        self._gather(count, doc_entry, int(n_docs1), out_doc, np.int64)

    # The merge steps' shaders write every output a later step reads (count past the entries
    # too): no MLX ``init_value``, which fills every output, workspaces included, before the
    # kernel runs.

    def _k_encode_piece_kind(self, g, b, args) -> None:
        (buf, pstart, spec, n_entries, w_slots, w_tok_bytes, w_bits, _slots, dbits, owner, count,
         scratch, cap) = args
        if int(dbits) != 0:
            _check_dedup(True)
        owner.a, count.a, scratch.a = self._run(
            "encode_piece_kind", g, b,
            [buf, pstart, spec, w_slots, w_tok_bytes, n_entries, w_bits, cap],
            [owner.size, count.size, scratch.size])

    def _k_encode_merge_huge(self, g, b, args) -> None:
        (buf, pstart, n_entries, owner, t_slots, t_bits, byte_ids, scratch, prio_ws, nxt, prv,
         heap, seg_ws, count, cap) = args
        if self._longest(pstart, n_entries) < HUGE_PIECE:
            return  # no such piece: no launch, nothing carried
        outs = self._run(
            "encode_merge_huge", g, b,
            [buf, pstart, owner, t_slots, byte_ids, scratch, count, n_entries, t_bits, cap],
            [scratch.size, count.size, owner.size, prio_ws.size, nxt.size, prv.size, heap.size,
             seg_ws.size])
        for h, o in zip((scratch, count, owner, prio_ws, nxt, prv, heap, seg_ws), outs):
            h.a = o

    def _k_encode_merge_short(self, g, b, args) -> None:
        (buf, pstart, n_entries, owner, t_slots, t_bits, byte_ids, scratch, prio_ws, count,
         cap) = args
        scratch.a, count.a, prio_ws.a = self._run(
            "encode_merge_short", g, b,
            [buf, pstart, owner, t_slots, byte_ids, scratch, count, n_entries, t_bits, cap],
            [scratch.size, count.size, prio_ws.size])

    def _k_encode_merge_long(self, g, b, args) -> None:
        (buf, pstart, n_entries, owner, t_slots, t_bits, byte_ids, join, scratch, where, nxt, prv,
         heap, tree, size, count, cap) = args
        if self._longest(pstart, n_entries) < LONG_PIECE:
            return  # no long piece: no launch, no workspace, nothing carried
        outs = self._run(
            "encode_merge_long", g, b,
            [buf, pstart, owner, t_slots, byte_ids, join, scratch, count, n_entries, t_bits, cap],
            [scratch.size, count.size, where.size, nxt.size, prv.size, heap.size, tree.size,
             size.size])
        for h, o in zip((scratch, count, where, nxt, prv, heap, tree, size), outs):
            h.a = o

    def _longest(self, pstart: MetalArray, n_entries) -> int:
        """The chunk's longest entry in bytes, read on the host: the long-piece shaders run
        only for a chunk that has such a piece (most have none), where each would carry every
        entry's ids through fresh outputs and allocate 20 bytes of workspace per byte of text.
        The read waits for the chunk's steps so far (the queued work keeps the GPU busy
        meanwhile); it is made once per chunk (both shaders ask with the same ``pstart``)."""
        got = self._longest_of
        if got is not None and got[0] is pstart.a:
            return got[1]
        mx = self.mx
        n = int(n_entries.a[0].item()) if isinstance(n_entries, MetalArray) else int(n_entries)
        x = pstart.a
        longest = int(mx.max(x[1:n] - x[:n - 1]).item()) if n > 1 else 0
        self._longest_of = (x, longest)
        return longest

    def _k_encode_wordpiece(self, g, b, args) -> None:
        (buf, pstart, spec, n_entries, t_slots, t_bits, cont, unk, max_chars, owner, count,
         scratch, cap) = args
        owner.a, count.a, scratch.a = self._run(
            "encode_wordpiece", g, b,
            [buf, pstart, spec, t_slots, n_entries, t_bits, cont, unk, max_chars, cap],
            [owner.size, count.size, scratch.size])

    def _k_encode_emit_u16(self, g, b, args) -> None:
        self._emit("encode_emit_u16", g, b, args)

    def _k_encode_emit_u32(self, g, b, args) -> None:
        self._emit("encode_emit_u32", g, b, args)

    def _emit(self, shader, g, b, args) -> None:
        n_entries, pstart, owner, out_off, scratch, out, cap = args
        (out.a,) = self._run(shader, g, b, [pstart, owner, out_off, scratch, n_entries, cap],
                             [out.size])


#: the Metal form of each CUDA kernel: ``MetalDevice._k_<kernel>``
# (the SentencePiece steps come from the SpmMetalSteps base: spm.py)
_STEPS = {k[3:]: f for cls in reversed(MetalDevice.__mro__) for k, f in vars(cls).items()
          if k.startswith("_k_")}
