"""The cuda backend: the device-neutral driver (``driver.py``) on an NVIDIA GPU through CuPy.

``CupyDevice`` is the whole CUDA-specific part: kernels compiled by NVRTC (``kernels.py``: one
module per file, source digest and defines), two non-blocking streams, pinned staging buffers
reused per stream slot, device events for timing. Everything else (chunking, token spans,
host-cut pieces, out-of-memory splitting, fallbacks) is the driver's.
"""

from __future__ import annotations

import os
import sys

from ..driver import DeviceBackend
from .device import CupyDevice

INSTALL_HINT = ('pip install "gputok[cuda12]" (CUDA 12 driver) or "gputok[cuda13]" (CUDA 13), '
                "on a machine with an NVIDIA GPU")


def _no_driver() -> bool:
    """Linux without an NVIDIA driver (no device node, no /proc entry, no WSL GPU): importing
    CuPy only to hear that costs ~0.4 s per process (``auto`` probes CUDA first)."""
    if not sys.platform.startswith("linux"):
        return False
    return not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia/version",
                                                "/dev/dxg"))


def available() -> tuple[bool, str]:
    if _no_driver():
        return False, f"no NVIDIA driver on this machine (/dev/nvidiactl is absent; {INSTALL_HINT})"
    try:
        import cupy
    except ImportError:
        return False, f"CuPy is not installed ({INSTALL_HINT})"
    except Exception as e:  # a broken CUDA install must not break `import gputok`
        return False, f"CuPy failed to import ({type(e).__name__}: {e}); {INSTALL_HINT}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"CuPy sees no usable CUDA device ({type(e).__name__}: {e})"
    if n < 1:
        return False, "CuPy sees no CUDA device"
    return True, f"CuPy {cupy.__version__}, {n} CUDA device(s)"


def create(device_id: "int | None" = None, *, memory=None) -> DeviceBackend:
    """The cuda backend on GPU ``device_id`` (default: CuPy's current device). ``memory``: the
    most device memory it may hold (bytes, or a size like ``"24G"``; default
    ``$GPUTOK_CUDA_MEMORY``, else what the GPU has free)."""
    dev = CupyDevice(device_id, memory=memory)
    name = "cuda" if device_id is None else f"cuda:{device_id}"
    return DeviceBackend(dev, name=name)




def device_count() -> int:
    """How many CUDA devices CuPy sees (``RuntimeError`` saying why where there are none)."""
    ok, why = available()
    if not ok:
        raise RuntimeError(why)
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())
