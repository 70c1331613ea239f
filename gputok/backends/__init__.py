"""Backends: how a batch runs, stage by stage (``numpy``), or on a device (``cuda``, ``metal``,
``native``: the CPU's cores).

A backend encodes ``(model, documents, allowed, disallowed) -> (ids, offsets)``. The numpy
backend composes the numpy stages of ``gputok.stages``; a device backend is the one
device-neutral driver (``driver.py``) over a device adapter (``cuda.py`` for CuPy; the tests
use the kernel emulator), running on the device every stage it has kernels for and the numpy
stage on the host for the rest. Each such host stage, or any part of a batch that goes to the
CPU (out of device memory), is a *fallback*: counted in ``backend.fallbacks`` and warned about
once (``FallbackWarning``), so tests can assert that the device path really ran.

``get_backend("auto")`` picks CUDA when CuPy sees a GPU, Metal when MLX runs on a Mac GPU, then
the native CPU backend (the same kernels compiled for the host, when a C++ compiler is found),
else numpy; ``auto_report`` says what it took and why it skipped the others (a backend that is
available but fails to start, e.g. a compiler error, is a counted ``FallbackWarning``). A name
that is not available raises ``RuntimeError`` saying why and which ``pip install`` fixes it.
cupy and mlx are imported only here, on demand (``import gputok`` stays light).
"""

from __future__ import annotations

import importlib
import threading
import warnings
from collections import Counter

import numpy as np

BACKENDS = ("numpy", "cuda", "metal", "native")
AUTO_ORDER = ("cuda", "metal", "native")  # then numpy


class FallbackWarning(RuntimeWarning):
    """Part of a batch ran on the host instead of the backend's device (a stage the device does
    not implement for this model, out of device memory, an oversized document)."""


class Backend:
    """Base of every backend: a name, and fallback accounting."""

    name = "?"

    def __init__(self):
        self.fallbacks: Counter = Counter()  # (stage, reason) -> times
        self._warned: set = set()
        self._warn_lock = threading.Lock()

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset
               ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def plan(self, model) -> dict:
        """Where each stage runs for ``model``: {stage: description}."""
        raise NotImplementedError

    def encode_list(self, model, text: str, allowed: frozenset) -> list:
        """One text's ids as a Python list (the single-text API)."""
        from ..stages.lists import id_list
        from ..stages.pack import Documents

        ids, _ = self.encode(model, Documents([text]), allowed, frozenset())
        return id_list(ids)

    def prepare_ahead(self, model) -> None:
        """Start getting ``model`` ready (its tables on the device) in the background, for a
        caller that knows a batch is coming; nothing by default. Optional: the first batch
        prepares what is not ready."""

    def describe(self, model) -> str:
        return f"{model.name} on {self.name}: " + "; ".join(f"{k} {v}" for k, v in
                                                             self.plan(model).items())

    def fallback(self, stage: str, reason: str, message: str, *, once_key=None) -> None:
        """Count a fallback, and warn about it once per ``once_key`` (default: stage+reason)."""
        self.fallbacks[(stage, reason)] += 1
        key = once_key if once_key is not None else (stage, reason)
        with self._warn_lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(f"gputok {self.name}: {message}", FallbackWarning, stacklevel=4)


_instances: dict = {}
_lock = threading.RLock()  # "auto" resolves to another name inside
#: why "auto" took what it took: {"backend": name, "skipped": {name: reason}}
auto_report: dict = {}


def _module(kind: str):
    return importlib.import_module(f"gputok.backends.{kind}")


def availability() -> dict[str, tuple[bool, str]]:
    """{backend: (available, reason)} without raising; the reason of the one ``"auto"`` takes
    says so (``gputok info`` prints these).

    >>> availability()["numpy"][0]
    True
    """
    out = {}
    for name in BACKENDS:
        try:
            ok, why = _module(name).available()
        except Exception as e:  # a broken optional install must not break `gputok info`
            ok, why = False, f"{type(e).__name__}: {e}"
        out[name] = (ok, why)
    failed = {n for n, why in auto_report.get("skipped", {}).items()
              if why.startswith("failed to start")}  # auto ran here and one failed to start
    chosen = next((n for n in AUTO_ORDER if out[n][0] and n not in failed), "numpy")
    ok, why = out[chosen]
    out[chosen] = (ok, f"{why}; used by backend='auto'")
    return out


# ---- what callers outside the engine ask of the backends (the corpus job, training) ----------

GPU_KINDS = ("cuda", "metal")  # one process drives one of these; a GPU context does not survive fork


def is_gpu(name: str) -> bool:
    """Whether backend ``name`` drives a GPU (a corpus job gives it one worker, spawned).

    >>> is_gpu("cuda:1"), is_gpu("native")
    (True, False)
    """
    return name.partition(":")[0] in GPU_KINDS


def device_available(name: str) -> tuple[bool, str]:
    """Whether backend ``name``'s device can be used, and why not, without starting it
    (``cuda:3`` is not opened: a context per GPU in the job's own process would cost each GPU
    memory its worker needs)."""
    kind = name.partition(":")[0]
    if kind not in BACKENDS:
        return False, f"unknown backend {name!r}"
    try:
        return _module(kind).available()
    except Exception as e:
        return False, f"{type(e).__name__}: {e}"


def device_count(kind: str) -> int:
    """How many devices of ``kind`` (``"cuda"``) there are; ``RuntimeError`` saying why when
    there are none."""
    if kind != "cuda":
        raise RuntimeError(f"{kind!r} is not a device with an index")
    ok, why = device_available(kind)
    if not ok:
        raise RuntimeError(why)
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def host_routine(symbol: str):
    """A host routine of the native library (``gputok_jsonl_parse``: the JSON-lines reader) as
    a ctypes function, or None when the library is not built yet (this never compiles: reading
    a corpus must not start a build) or cannot be loaded."""
    try:
        lib = _module("native").library(compile=False)
    except Exception:
        return None
    return None if lib is None else getattr(lib.lib, symbol)


def huge_block(nbytes: int) -> np.ndarray:
    """A new uint8 array of ``nbytes`` in 2 MB pages where the OS has them (first touches
    fault a 2 MB page at a time; ``host_pool.huge_block``)."""
    from .host_pool import huge_block as block

    return block(nbytes)


def build_seconds() -> float:
    """Seconds this process spent building device code (the native library's one-time compile),
    for a caller that reports its own time beside it (``gputok encode``'s summary).

    >>> build_seconds() >= 0
    True
    """
    import sys

    mod = sys.modules.get("gputok.backends.native_build")
    return mod.built_seconds if mod is not None else 0.0


def get_backend(name="auto") -> Backend:
    """A backend by name (``"auto"``, ``"numpy"``, ``"native"``, ``"cuda"``, ``"cuda:1"``,
    ``"metal"``), built once per process; a ``Backend`` object is returned as is.

    >>> get_backend("numpy").name
    'numpy'
    """
    if not isinstance(name, str):
        if not hasattr(name, "encode"):
            raise TypeError(f"backend must be a name or a backend object, not {type(name)}")
        return name
    got = _instances.get(name)
    if got is not None:
        return got
    with _lock:
        got = _instances.get(name)
        if got is None:
            got = _instances[name] = _create(name)
    return got


def _create(name: str) -> Backend:
    if name == "auto":
        skipped = {}
        for cand in AUTO_ORDER:
            try:
                ok, why = _module(cand).available()
            except Exception as e:
                ok, why = False, f"{type(e).__name__}: {e}"
            from ..stages import counters

            if not ok:
                skipped[cand] = why
                counters[f"backend.auto.skipped.{cand}"] += 1
                continue
            try:
                got = get_backend(cand)
            except Exception as e:  # available, but it failed to start (e.g. a compiler error)
                skipped[cand] = f"failed to start: {e}"
                counters[f"backend.auto.failed.{cand}"] += 1
                warnings.warn(f"gputok: the {cand} backend failed to start, trying the next "
                              f"one ({e})", FallbackWarning, stacklevel=4)
                continue
            auto_report.update(backend=cand, skipped=skipped)
            return got
        auto_report.update(backend="numpy", skipped=skipped)
        return get_backend("numpy")
    kind, _, index = name.partition(":")
    if kind not in BACKENDS or (index and not index.isdigit()):
        raise ValueError(f"unknown backend {name!r}; choose one of: auto, "
                         f"{', '.join(BACKENDS)} (cuda:N picks a GPU)")
    mod = _module(kind)
    ok, why = mod.available()
    if not ok:
        raise RuntimeError(f"backend {name!r} is not available: {why}")
    return mod.create(int(index)) if index else mod.create()
