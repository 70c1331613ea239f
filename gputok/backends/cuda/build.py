"""Compiled CUDA modules: one CuPy module per (device, kernel file, source digest, defines),
compiled by NVRTC from the source every device gets (``kernels.build_source``).
"""

from __future__ import annotations

import functools

from ..kernels import build_source


@functools.lru_cache(maxsize=None)
def _cupy_module(device_id: int, digest: str, text: str):
    import cupy

    with cupy.cuda.Device(device_id):
        return cupy.RawModule(code=text, options=("-std=c++17",))


def cupy_module(device_id: int, file: str, extra_defines=()):
    """The compiled CuPy module of ``file`` on one GPU (compiled once per process; CuPy keeps
    the binary on disk, keyed by the full source text)."""
    text, digest, _ = build_source(file, extra_defines)
    return _cupy_module(device_id, digest, text)
