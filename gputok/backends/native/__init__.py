"""The native backend: the device-neutral driver (``driver.py``) on every CPU core.

The encode kernels (``kernels/encode_*.cu``) are compiled for the host by the machine's C++
compiler (``build.py``: the same sources every device gets, plus the host dialect header
``kernels/dialect_host.h``; built on first use and cached by source digest, compiler and flags)
and loaded by ``library.py``. ``NativeDevice`` (``device.py``) is the adapter the driver sees,
the CPU counterpart of ``cuda.CupyDevice``: a batch of several chunks runs on chunk workers
(one per thread, each chunk start to end on one); launches otherwise run a kernel's grid over
helper threads, or queue on a stream's thread; scans run as the runtime's parallel scan;
memory is numpy arrays from a recycled pool (``host_pool.py``), copies are views. Its one-call
forms (``calls.py``) run a chunk, a short text, one text's pre-tokenization or the merge of
host-cut pieces as one call; its sizes are in ``settings.py``, with why. Byte-level BPE batches
and texts take its per-document pass (``perdoc.py``: pre-tokenization, a piece cache and the
merge rule in one pass over each document, every thread busy) where it takes them.

Without a compiler the backend is unavailable (``gputok info`` says why) and ``"auto"`` takes
numpy; a compiler that fails on the sources is a counted fallback to numpy with a warning.
"""

from __future__ import annotations

# the pattern scanner's module (its class tables and cut rules: every plan of this device
# uses them) loads with the device, not inside a model's first batch (~1.5-5 ms there)
from ...stages import scan as _scan  # noqa: F401
from ..driver import DeviceBackend
from . import build as native_build
from .device import NativeDevice
from .library import library  # noqa: F401
from .settings import (CHUNK_BYTES, HOST_BLOCK, MAX_BLOCKS, SLAB_PER_THREAD,  # noqa: F401
                       TEXT_SHORT_MAX, chunk_bytes_for, threads_default)


def available() -> tuple[bool, str]:
    cxx, why = native_build.find_compiler()
    if cxx is None:
        return False, why
    return True, f"{why}, {threads_default()} threads (kernels compiled for this CPU)"


def create(threads: "int | None" = None, cache_slots: "int | None" = None,
           per_doc: bool = True, **options) -> DeviceBackend:
    """The native backend: the driver over a ``NativeDevice`` (builds the module on first use,
    raising ``native_build.NativeBuildError`` when the compiler fails); ``cache_slots`` and
    ``per_doc``: the per-document pass's piece cache, and whether there is one
    (``NativeDevice``).

    >>> create().dev.name  # doctest: +SKIP
    'native CPU (2 threads)'
    """
    dev = NativeDevice(threads, cache_slots=cache_slots, per_doc=per_doc)
    options.setdefault("chunk_bytes", chunk_bytes_for(dev.caps.chunk_workers))
    options.setdefault("dedup", True)  # each distinct piece merged once per chunk (see notes)
    be = DeviceBackend(dev, name="native", **options)
    be.start_workers()
    return be


