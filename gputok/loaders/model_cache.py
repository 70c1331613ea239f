"""Built models kept on disk: a vocabulary file loads in milliseconds the second time.

Building a ``Model`` from a 150K-entry tokenizer.json or a 262K-token GGUF takes seconds (the
vocabulary and merge dicts, the family's symbol and merge tables); reading the pickled result
back takes tens of milliseconds. ``cached(key, build)`` returns the stored model for ``key`` or
builds, stores and returns it. An entry is ``$GPUTOK_CACHE/models/<key>.pkl`` (``_cache``), and
is used only when everything it depends on is the same:

* the key: sha256 of the source (the file's bytes; a GGUF's metadata bytes), of the load's
  arguments (the name), of ``FORMAT``, and of gputok's own code (``_cache.code_digest``: every
  ``gputok/**/*.py``'s path, size and modification time, once per process): another gputok
  version or a local edit is another entry;
* the file: a header (magic, ``FORMAT``, the key, the payload's length and CRC-32) checked
  before the payload is unpickled; anything that does not match (a torn or damaged file, a
  foreign one) is ignored, the model rebuilt and the entry written again;
* writes go through a temporary file and a rename (``write_atomic``): a reader sees a whole
  entry or none, concurrent writers of one key write the same bytes and the last rename wins.

``GPUTOK_MODEL_CACHE=0`` turns it off. Entries are pickles: the cache directory must be as
trusted as the code (it already holds the compiled native library gputok loads). Only models
that took at least ``MIN_BUILD_S`` to build are stored (a tiny file rebuilds faster than its
entry is read; Mistral's 32K-piece .model builds in ~8 ms and reads back in ~2), none over
``MAX_BYTES`` pickled; the folder is kept under
``$GPUTOK_MODEL_CACHE_MB`` (default 2048): after a write, the entries used least recently (a
read touches its entry) go until it is under three quarters of that.

Performance notes: unpickling a Model is its Python dicts and lists (vocabulary, decoder, merge
list: ~20-40 ms per 100K entries here); a SentencePiece ``.model``'s is arrays (its pieces in
one blob: ``segmenters/pieces.py``; a 262K-piece model's entry, 6 MB, reads in ~10 ms), and its
encode tables are kept apart by content (``spm_build.py``). Values kept in
``functools.cached_property`` slots are left out (``_Pickler``). The source's sha256 (~2 ms for
10 MB) and the CRC-32 of the entry (~5 ms per 10 MB) are small beside it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import struct
import time
import weakref
import zlib

from .._cache import cache_dir, code_digest as _code_digest, write_atomic

FORMAT = 1
MAGIC = b"GPTKMDL\0"
MAX_BYTES = 1 << 30
MIN_BUILD_S = 0.005
_HEADER = struct.Struct("<8sI32sQI")  # magic, format, key (raw sha256), payload bytes, crc32


def enabled() -> bool:
    return os.environ.get("GPUTOK_MODEL_CACHE", "1").strip() not in ("0", "false", "no", "off")


def code_digest() -> bytes:
    """gputok's code, as ``_cache.code_digest`` states it."""
    return _code_digest()


def make_key(kind: str, source_digest: str, *args) -> bytes:
    """The key of a model built by loader ``kind`` from a source with ``source_digest``."""
    h = hashlib.sha256(b"gputok model %d\0" % FORMAT + code_digest())
    h.update(repr((kind, source_digest, args)).encode())
    return h.digest()


def path_for(key: bytes) -> str:
    return os.path.join(cache_dir("models"), key.hex()[:40] + ".pkl")


def read(key: bytes):
    """The model stored under ``key``, or None (absent, damaged, foreign, unreadable)."""
    try:
        with open(path_for(key), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < _HEADER.size:
        return None
    magic, fmt, stored_key, n, crc = _HEADER.unpack_from(data)
    payload = memoryview(data)[_HEADER.size:]
    if magic != MAGIC or fmt != FORMAT or stored_key != key or n != len(payload) \
            or zlib.crc32(payload) != crc:
        return None
    try:
        model = pickle.loads(payload)
    except Exception:  # a payload that passed the checks but does not unpickle: rebuild
        return None
    try:
        os.utime(path_for(key))  # (recently used: kept by ``_trim``)
    except OSError:
        pass
    return model


class _Pickler(pickle.Pickler):
    """Leaves out what an object caches in a ``functools.cached_property`` (recomputed on first
    use): a merge table's pair dict (``MergeTable.pairs``, rebuilt from its arrays) was a third
    of unpickling a SentencePiece model."""

    def reducer_override(self, obj):
        state = getattr(obj, "__dict__", None)
        if type(state) is not dict or not state or isinstance(obj, type):
            return NotImplemented
        cls = type(obj)
        derived = [k for k in state if isinstance(getattr(cls, k, None),
                                                  functools.cached_property)]
        if not derived:
            return NotImplemented
        return _restore, (cls, {k: v for k, v in state.items() if k not in derived})


def _restore(cls, state: dict):
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


def write(key: bytes, model) -> bool:
    """Store ``model`` under ``key``; False when it cannot be pickled, is over ``MAX_BYTES``,
    or the cache cannot be written."""
    import io

    buf = io.BytesIO()
    try:
        _Pickler(buf, protocol=5).dump(model)
    except Exception:
        return False
    payload = buf.getvalue()
    if len(payload) > MAX_BYTES:
        return False
    head = _HEADER.pack(MAGIC, FORMAT, key, len(payload), zlib.crc32(payload))
    if not write_atomic(path_for(key), head + payload):
        return False
    _trim()
    return True


def _trim() -> None:
    """Keep the folder under its budget: drop the least recently used entries."""
    try:
        budget = float(os.environ.get("GPUTOK_MODEL_CACHE_MB", "") or 2048) * 1e6
        folder = cache_dir("models")
        entries = []
        for e in os.scandir(folder):
            if e.name.endswith(".pkl"):
                st = e.stat()
                entries.append((st.st_mtime, st.st_size, e.path))
    except (OSError, ValueError):
        return
    total = sum(size for _, size, _ in entries)
    if total <= budget:
        return
    for _, size, path in sorted(entries):
        if total <= budget * 0.75:
            break
        try:
            os.unlink(path)
            total -= size
        except OSError:
            pass


# the models of this process by key, while an encoding holds them: loading a file again is a
# lookup (models are immutable; their tables, built on first use, are then built once)
_live: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def cached(key: "bytes | None", build):
    """``build()``'s model, through the cache when ``key`` is given and the cache is on: the
    same model object while this process holds it, else the stored entry, else built (and
    stored when that took ``MIN_BUILD_S``)."""
    if key is None or not enabled():
        return build()
    model = get(key)
    if model is None:
        start = time.perf_counter()
        model = build()
        if time.perf_counter() - start >= MIN_BUILD_S:
            write(key, model)
        _keep(key, model)
    return model


def get(key: bytes):
    """The model of ``key`` this process holds, else the stored entry's, else None."""
    model = _live.get(key)
    if model is None:
        model = read(key)
        if model is not None:
            _keep(key, model)
    return model


def _keep(key: bytes, model) -> None:
    try:
        _live[key] = model
    except TypeError:  # (an object without weak references: not kept)
        pass
