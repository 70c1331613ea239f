"""Where gputok keeps what it derives once per machine (merge tables, ranks indexes, native
libraries, pinned patterns): ``$GPUTOK_CACHE``, default ``~/.cache/gputok``.

Every entry is keyed by everything it is derived from, so a stale entry is never read; an
unwritable cache only costs the rebuild.
"""

from __future__ import annotations

import os

__all__ = ["cache_dir", "write_atomic"]


def cache_dir(*parts: str) -> str:
    """The cache root, or a folder below it (not created here).

    >>> cache_dir("native").endswith("native")
    True
    """
    root = os.environ.get("GPUTOK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "gputok")
    return os.path.join(root, *parts)


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
