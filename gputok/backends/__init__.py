"""Backends: how a batch runs, stage by stage (``numpy``), or on a device (``cuda``, ``metal``,
``native``: the CPU's cores).

A backend encodes ``(model, documents, allowed, disallowed) -> (ids, offsets)`` and one text
(``encode_text``). The numpy backend composes the numpy stages of ``gputok.stages``; a device
backend is the one device-neutral driver (``driver.py``) over a device adapter, running on the
device every stage it has kernels for and the numpy stage on the host for the rest. Each such
host stage, or any part of a batch that goes to the CPU (out of device memory), is a
*fallback*: counted in ``backend.fallbacks`` and warned about once (``FallbackWarning``), so
tests can assert that the device path really ran.

``get_backend("auto")`` picks CUDA when CuPy sees a GPU, Metal when MLX runs on a Mac GPU, then
the native CPU backend (the same kernels compiled for the host, when a C++ compiler is found),
else numpy; ``auto_report`` says what it took and why it skipped the others (a backend that is
available but fails to start, e.g. a compiler error, is a counted ``FallbackWarning``). A name
that is not available raises ``RuntimeError`` saying why and which ``pip install`` fixes it.
cupy and mlx are imported only here, on demand (``import gputok`` stays light).

DEVICES. A device is one folder here and one registration:

    protocol.py     the device protocol: the members every adapter has, and the
                    ``Capabilities`` value it states (the driver reads it, never probes)
    devices.py      DEVICES: one ``Registration`` per device (name, folder, "auto" order, GPU
                    or not, indexed, its trainer); get_backend, the CLI, the corpus job and
                    ``train_bpe`` read it
    cuda/           CuPy on NVIDIA GPUs: the adapter (device.py), NVRTC modules (build.py),
                    the trainer (train.py)
    metal/          MLX on Apple GPUs: the adapter, its arrays, the shader interface and kernel
                    factory, the trainer and its numpy reference
    native/         the host's cores: the adapter, its one-call forms, the library's build and
                    loading, its tuned sizes
    emulated/       numpy arrays and a given launch function (the tests' kernel emulator); not
                    registered: it brings no kernels of its own

and what every device shares: the driver and its runners (``driver.py``, ``runners/``), the
stages on a device (``device_stages.py``), a model's tables (``device_tables.py``; a
SentencePiece model's: ``spm_tables.py``, ``spm_device.py``), the host side of a chunk
(``hostplan.py``), kernel sources and constants (``kernels.py``), host workspace
(``host_pool.py``) and the training kernels' numpy reference (``train_arrays.py``).

Adding a device, step by step:

1. a folder here with ``available() -> (bool, why)`` and ``create(...)``, whose adapter
   subclasses ``protocol.Device`` (uploads, launches, downloads, memory) and states its
   ``Capabilities`` (streams, chunk workers, one-call texts, per-document pass, ...): the driver
   picks its runners (``runners/``) from them and never probes;
2. its kernels from the shared sources (``kernels/common/*.h``; ``kernels.py`` hands them and
   their constants over), so every rule stays stated once;
3. one ``Registration`` in ``devices.py`` (its place in "auto", GPU or not, indexed, trainer);
   ``get_backend``, the CLI, the corpus job and ``train_bpe`` then know it, and nothing else
   names it;
4. its row in ``tests/test_backend_matrix.py`` (every model x path against the oracles) and, for
   a GPU, the emulator's run of its kernels (``tests/emulator``).

Modules here import the stages, the components and the model, never the loaders, the encoding
or the corpus job (``tests/test_layers.py``).
"""

from __future__ import annotations

import importlib
import threading
import warnings

from .base import Backend, FallbackWarning  # noqa: F401  (the backends' base, re-exported)
from .devices import DEVICES, device_count, is_gpu, registration  # noqa: F401

BACKENDS = ("numpy",) + tuple(r.name for r in DEVICES)
AUTO_ORDER = tuple(r.name for r in DEVICES if r.auto)  # then numpy


_instances: dict = {}
_lock = threading.RLock()  # "auto" resolves to another name inside
#: why "auto" took what it took: {"backend": name, "skipped": {name: reason}}
auto_report: dict = {}


def _module(kind: str):
    reg = registration(kind)
    return reg.module() if reg is not None else importlib.import_module("gputok.backends.numpy")


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

# (``is_gpu`` and ``device_count`` are the registrations' answers: ``devices.py``)


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


def host_routine(symbol: str, *, build: bool = False):
    """A host routine of the native library (``gputok_jsonl_parse``: the JSON-lines reader) as
    a ctypes function, or None when the library is not built yet (this never compiles: reading
    a corpus must not start a build) or cannot be loaded. ``build``: built first where it is
    not (a caller that cannot go on without it: verifying xxh64 shards), its error raised."""
    try:
        lib = _module("native").library(compile=build)
    except Exception:
        if build:
            raise
        return None
    return None if lib is None else getattr(lib.lib, symbol)


def huge_block(nbytes: int):
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

    mod = sys.modules.get("gputok.backends.native.build")
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
    reg = registration(kind)
    if kind not in BACKENDS or (index and not (index.isdigit() and reg is not None
                                               and reg.indexed)):
        indexed = [r.name for r in DEVICES if r.indexed]
        raise ValueError(f"unknown backend {name!r}; choose one of: auto, "
                         f"{', '.join(BACKENDS)} ({', '.join(indexed)}:N picks a GPU)")
    mod = _module(kind)
    ok, why = mod.available()
    if not ok:
        raise RuntimeError(f"backend {name!r} is not available: {why}")
    return mod.create(int(index)) if index else mod.create()
