"""The metal backend's device arrays: ``MetalArray`` handles over ``mx.array``s (MLX gives every
launch fresh outputs, so a handle whose array a launch replaces keeps the driver's in-place
updates), pending downloads, and MLX's allocation failures as the ``MemoryError`` the driver's
out-of-memory split catches. See ``metal.py`` for the adapter.
"""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["PAD", "MetalArray", "MetalOutOfMemory"]

PAD = 8  # MLX passes an input of fewer elements in the constant address space: pad every array


class MetalOutOfMemory(MemoryError):
    """MLX could not allocate a buffer (or the GPU ran out of memory): the driver splits the
    batch, then falls back to the host, as on CUDA."""


_OOM_WORDS = ("out of memory", "insufficient memory", "malloc", "allocate", "buffer size")


@contextlib.contextmanager
def _oom_as_memory_error():
    """MLX reports a failed allocation as a RuntimeError ("[metal::malloc] Attempting to
    allocate ...", "Insufficient Memory" from a command buffer); make it the MemoryError the
    driver's out-of-memory split catches. (The exact messages are to confirm on a Mac.)"""
    try:
        yield
    except RuntimeError as e:
        if any(w in str(e).lower() for w in _OOM_WORDS):
            raise MetalOutOfMemory(str(e)) from e
        raise


class MetalArray:
    """A device array of the driver: an ``mx.array`` (padded to at least ``PAD`` elements) that
    launches replace, so the driver's in-place updates hold. ``len`` is the logical length."""

    __slots__ = ("_a", "n", "dtype")

    def __init__(self, a, n: int, dtype):
        self._a, self.n, self.dtype = a, int(n), np.dtype(dtype)

    @property
    def a(self):
        if self._a is None:  # allocated on first use (most workspaces are only output shapes)
            import mlx.core as mx

            self._a = mx.zeros((max(self.n, PAD),), dtype=_mx_dtype(self.dtype))
        return self._a

    @a.setter
    def a(self, value) -> None:
        self._a = value

    @property
    def size(self) -> int:  # the padded length: what a shader may address
        return max(self.n, PAD)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, sl):
        if not isinstance(sl, slice) or sl.step not in (None, 1):
            raise TypeError("a MetalArray takes plain slices only")
        lo, hi, _ = sl.indices(self.n)
        return MetalArray(self.a[lo:hi], hi - lo, self.dtype)


def _mx_dtype(dtype):
    from .kernels import mx_dtype

    return mx_dtype(dtype)


class _Pending:
    def __init__(self, arr, count: int):
        self.value = arr
        self.count = count

    def result(self) -> np.ndarray:
        if self.count == 0:
            return np.zeros(0, self.value.dtype)
        with _oom_as_memory_error():  # an asynchronous failure surfaces here
            # unified memory: the array's own buffer, not copied (the view keeps the array
            # alive; no launch writes it again: outputs are fresh). Slicing the mx.array first
            # and copying that made the ids twice before the batch's output took them.
            return np.asarray(self.value.a)[:self.count]

    def view(self) -> np.ndarray:
        return self.result()
