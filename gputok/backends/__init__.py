"""Backends: one module each (numpy, cuda, metal), the same ``encode_documents`` protocol.

``get_backend("auto")`` picks CUDA when CuPy sees a GPU, Metal when MLX runs on a Mac GPU, else
numpy. Asking for an unavailable backend by name raises ``RuntimeError`` saying why and which
``pip install`` fixes it. Heavy modules (cupy, mlx) are imported only here, on demand.
"""

from __future__ import annotations

import importlib
from typing import Protocol

import numpy as np

BACKENDS = ("numpy", "cuda", "metal")


class Backend(Protocol):
    name: str

    def encode_documents(self, encoding, docs, allowed: frozenset, disallowed: frozenset
                         ) -> tuple[np.ndarray, np.ndarray]: ...


_instances: dict[str, Backend] = {}


def availability() -> dict[str, tuple[bool, str]]:
    """{backend: (available, reason)} without raising."""
    out = {}
    for name in BACKENDS:
        try:
            mod = importlib.import_module(f"gputok.backends.{name}")
            ok, why = mod.available()
        except Exception as e:  # a broken optional install must not break `gputok info`
            ok, why = False, f"{type(e).__name__}: {e}"
        out[name] = (ok, why)
    return out


def get_backend(name: str = "auto") -> Backend:
    if isinstance(name, str) and name in _instances:
        return _instances[name]
    if not isinstance(name, str):
        return name  # an already-built backend object
    if name == "auto":
        for cand in ("cuda", "metal"):
            mod = importlib.import_module(f"gputok.backends.{cand}")
            if mod.available()[0]:
                backend = get_backend(cand)
                break
        else:
            backend = get_backend("numpy")
        _instances["auto"] = backend
        return backend
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of: auto, {', '.join(BACKENDS)}")
    mod = importlib.import_module(f"gputok.backends.{name}")
    ok, why = mod.available()
    if not ok:
        raise RuntimeError(f"backend {name!r} is not available: {why}")
    _instances[name] = mod.create()
    return _instances[name]
