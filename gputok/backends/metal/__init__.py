"""The metal backend: the shared encode driver (``driver.py``) on an Apple GPU through MLX.

``MetalDevice`` (``device.py``) is a device adapter (``protocol.py``) whose arrays are
``mx.array``s (``arrays.py``) and whose kernels are the shaders of ``shaders/encode_*.metal``,
built once each through ``mx.fast.metal_kernel`` by a ``KernelFactory`` (keyed by name + source hash; the tests swap in
the emulator-backed one of ``tests/emulator/mlx_bridge.py``, so this module runs unchanged on
Linux over ``mlx[cpu]`` arrays). The driver, its chunking, fallbacks and counters are the ones
CUDA uses; only ``launch`` differs: the driver names a CUDA kernel with CUDA's arguments (some
updated in place), and the adapter runs the Metal form of that step.

Two facts of MLX shape the adapter (``shaders/encode_common.metal`` has the shader side):

* **Outputs are fresh buffers on every call**; no input is updated in place. A device array is
  a ``MetalArray`` handle whose ``mx.array`` a launch replaces, so the driver's "in place" holds.
  A shader that completes an array an earlier one began takes the old one as an input and
  carries what it does not change (``scratch_in`` / ``count_in``).
* **32-bit atomics only**: the CUDA dedup (a 64-bit compare-and-swap per piece) has no Metal
  form, so ``dedup=True`` is refused with the reason (dedup is off by default everywhere).

Steps that are whole-array operations run as MLX operations on the device, not as shaders:
the prefix sums (``mx.cumsum``), the mark scatter, the special-token scatter,
the per-document gathers. MLX evaluates lazily; ``launch`` queues each step with
``mx.async_eval`` so the GPU works while the host prepares the next chunk.

Performance notes (design choices; nothing is timed on Apple hardware yet, for want of one --
``bench/bench_metal.py`` is ready for a Mac's first run):
* Carrying ids through ``encode_merge_short`` / ``encode_merge_long`` costs one copy of the
  final ids per stage (count_in[e] ids per entry, mostly one) instead of a read-write buffer.
* The long-piece workspaces are outputs of ``encode_merge_long`` / ``encode_merge_huge`` (MLX
  has no scratch buffers): those shaders run only for a chunk whose longest entry needs them,
  read on the host once per chunk (a wait for the chunk's steps so far), since each carries
  every entry's ids through fresh outputs. No output is filled before a shader (no
  ``init_value``): the shaders write what later steps read. Downloads are views of the
  unified-memory buffers (the batch's output takes the ids once).
* MLX's scans replace the reduce-then-scan kernels of ``encode_scan.cu``: MLX ships tuned
  Metal scans, and the emulator has nothing to prove there.
"""

from __future__ import annotations

import sys
from typing import Callable

from ..driver import MIN_CHUNK, DeviceBackend
from .arrays import PAD, MetalArray, MetalOutOfMemory, _oom_as_memory_error  # noqa: F401
from .device import MetalDevice, _check_dedup, _device_info, gpu_name  # noqa: F401
from .spm import SPM_SHADERS

INSTALL_HINT = 'on a Mac with Apple silicon: pip install "gputok[metal]"'
SHADERS = ("encode_pretok_classify", "encode_pretok_spans", "encode_o200k_classify",
           "encode_o200k_spans", "encode_nfc_flags",
           "encode_nfc_compact", "encode_entries_compact", "encode_piece_kind",
           "encode_merge_huge", "encode_merge_short", "encode_merge_long", "encode_wordpiece",
           "encode_emit_u16", "encode_emit_u32") + SPM_SHADERS  # shaders/<name>.metal


def available() -> tuple[bool, str]:
    """(True, the GPU's name) when MLX imports and sees a Metal device, else (False, why).

    >>> gputok.backends.metal.available()  # on Linux with pip install "mlx[cpu]"
    (False, 'MLX has no Metal device here (mx.metal.is_available() is False) ...')

    Off macOS the answer is known without importing MLX (~10-20 ms, and numpy.ma with it): the
    first ``backend="auto"`` call of a process on Linux with ``mlx[cpu]`` paid that.
    """
    if sys.platform != "darwin":
        return False, ("MLX has no Metal device here (mx.metal.is_available() is False off "
                       f"macOS, this is {sys.platform}): the metal backend needs macOS on Apple "
                       f"silicon; {INSTALL_HINT}")
    try:
        import mlx.core as mx
    except ImportError as e:
        return False, f"MLX is not installed ({e}); {INSTALL_HINT}"
    except Exception as e:  # a broken MLX install must not break `import gputok`
        return False, f"MLX failed to import ({type(e).__name__}: {e}); {INSTALL_HINT}"
    try:
        ok = bool(mx.metal.is_available())
    except Exception as e:  # an MLX build without the metal module
        return False, f"MLX cannot query Metal ({type(e).__name__}: {e})"
    if not ok:
        return False, ("MLX has no Metal device here (mx.metal.is_available() is False): the "
                       f"metal backend needs macOS on Apple silicon; {INSTALL_HINT}")
    return True, f"MLX {getattr(mx, '__version__', '?')}, Metal GPU: {gpu_name()}"


def create(*, factory=None, dedup: bool = False, chunk_bytes: "int | None" = None,
           pretok: str = "auto", min_chunk: int = MIN_CHUNK, **device_options) -> DeviceBackend:
    """The metal backend (``factory``: the kernel factory, MLX's by default; the other options
    are ``DeviceBackend``'s and ``MetalDevice``'s). ``get_backend("metal")`` calls this.

    >>> enc.encode_batch_arrays(texts, backend=create(chunk_bytes=64 << 20))  # on a Mac
    """
    if factory is None:
        ok, why = available()
        if not ok:
            raise RuntimeError(f"the metal backend is not available: {why}")
    dev = MetalDevice(factory=factory, **device_options)
    return DeviceBackend(dev, name="metal", dedup=_check_dedup(dedup), chunk_bytes=chunk_bytes,
                         pretok=pretok, min_chunk=min_chunk)


def emulated(make: Callable, **options) -> DeviceBackend:
    """The metal backend with kernels built by ``make`` (``mx.fast.metal_kernel``'s signature;
    the tests pass the emulator's, over ``mlx[cpu]`` arrays).

    >>> be = emulated(metal_kernel_maker(order="reverse"), block=32, max_blocks=2)
    """
    from .kernels import KernelFactory

    return create(factory=KernelFactory(make), **options)
