"""Where gputok keeps what it derives once per machine (merge tables, ranks indexes, native
libraries, pinned patterns): ``$GPUTOK_CACHE``, default ``~/.cache/gputok``.

Every entry is keyed by everything it is derived from, so a stale entry is never read; an
unwritable cache only costs the rebuild.
"""

from __future__ import annotations

import os

__all__ = ["cache_dir", "code_digest", "write_atomic", "write_arrays", "map_arrays"]


def cache_dir(*parts: str) -> str:
    """The cache root, or a folder below it (not created here).

    >>> cache_dir("native").endswith("native")
    True
    """
    root = os.environ.get("GPUTOK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "gputok")
    return os.path.join(root, *parts)


_CODE: list = []


def code_digest() -> bytes:
    """sha256 of gputok's Python sources as the file system states them (each file's path,
    size and modification time, in ns): what a cache entry built by this code is keyed by, so
    another version or a local edit is another entry. Once per process (~1 ms for 200 files;
    reading and hashing their contents cost 10-30 ms)."""
    if not _CODE:
        import hashlib

        h = hashlib.sha256()
        root = os.path.dirname(os.path.abspath(__file__))
        todo = [""]
        while todo:
            rel = todo.pop()
            with os.scandir(os.path.join(root, rel)) as it:
                entries = sorted(it, key=lambda e: e.name)
            for e in entries:
                name = f"{rel}/{e.name}" if rel else e.name
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__":
                        todo.append(name)
                elif e.name.endswith(".py"):
                    st = e.stat()
                    h.update(b"%s\0%d\0%d\0" % (name.encode(), st.st_size, st.st_mtime_ns))
        _CODE.append(h.digest())
    return _CODE[0]


def write_atomic(path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` through a temporary file and a rename, so a reader sees the
    whole file or none; False (and nothing left behind) when the cache cannot be written."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


# ---- arrays stored ready to map -----------------------------------------------------------------

_ARR_MAGIC = b"GPTKARR\0"
_ARR_FORMAT = 1
_ARR_ALIGN = 64


def write_arrays(path: str, arrays: dict, scalars: "dict | None" = None) -> bool:
    """Store named arrays (any dtype and shape) and JSON-able scalars in one file that
    ``map_arrays`` maps without reading it: a header (magic, format, JSON index) and each array's
    bytes, 64-byte aligned. Written atomically (``write_atomic``); False when it cannot be."""
    import json
    import struct

    import numpy as np

    index, parts, pos = [], [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        pad = -pos % _ARR_ALIGN
        parts.append(b"\0" * pad)
        pos += pad
        index.append([name, a.dtype.str, list(a.shape), pos, a.nbytes])
        parts.append(a.tobytes())
        pos += a.nbytes
    head = json.dumps({"arrays": index, "scalars": scalars or {}, "data": pos}).encode()
    start = 16 + len(head)
    start += -start % _ARR_ALIGN
    pre = _ARR_MAGIC + struct.pack("<II", _ARR_FORMAT, len(head)) + head
    return write_atomic(path, pre + b"\0" * (start - len(pre)) + b"".join(parts))


def _map(fd: int):
    """A read-only shared mapping of the whole file. Where the OS allows (Linux), its page
    table is filled at once (``MAP_POPULATE``: ~0.5-4 ms for 12-25 MB in the page cache): else
    the first touch of each page is a fault in the middle of an encode, and the first short
    encode after start-up paid those faults (2x its time for a 10 KB text)."""
    import mmap

    populate = getattr(mmap, "MAP_POPULATE", 0)
    if populate and hasattr(mmap, "MAP_SHARED") and hasattr(mmap, "PROT_READ"):
        try:
            return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
        except OSError:
            pass
    return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)


def map_arrays(path: str) -> "tuple[dict, dict] | None":
    """(arrays, scalars) of a ``write_arrays`` file, the arrays read-only views of one shared
    mapping (``_map``: shared by every process mapping the file, no copy); None when the file
    is absent, of another format, or its sizes do not add up (damaged)."""
    import json
    import struct

    import numpy as np

    try:
        with open(path, "rb") as f:
            pre = f.read(16)
            if len(pre) != 16 or pre[:8] != _ARR_MAGIC:
                return None
            fmt, hlen = struct.unpack("<II", pre[8:])
            if fmt != _ARR_FORMAT or hlen > 1 << 20:
                return None
            head = json.loads(f.read(hlen))
            start = 16 + hlen
            start += -start % _ARR_ALIGN
            size = os.fstat(f.fileno()).st_size
            if size != start + int(head["data"]):
                return None
            mm = _map(f.fileno()) if size else b""
        arrays = {}
        for name, dtype, shape, off, nbytes in head["arrays"]:
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if off < 0 or off + nbytes > int(head["data"]) or count * dt.itemsize != nbytes:
                return None
            arrays[name] = np.frombuffer(mm, dt, count, start + off).reshape(shape)
        return arrays, dict(head["scalars"])
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
