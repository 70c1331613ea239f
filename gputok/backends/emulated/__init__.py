"""The emulated device: the driver's device protocol (``protocol.py``) on numpy arrays, every
kernel run by a launch function it is given. The tests give it the CPU kernel emulator
(``tests/emulator``), so CI runs every CUDA kernel through the real driver without a GPU; a
memory limit simulates a small device (out-of-memory splits). It states a GPU's capabilities
(two streams, the block scans) unless told fewer. Not a registered device: it has no kernels
of its own to offer a user.
"""

from __future__ import annotations

import collections
import contextlib
import time
from typing import Callable

import numpy as np

from ..protocol import Capabilities, Device, Ready


class DeviceOutOfMemory(MemoryError):
    """Raised by ``ArrayDevice`` when a simulated memory limit is exceeded (tests)."""


class ArrayDevice(Device):
    """The same launch layer on numpy arrays: every kernel runs through ``launch(name, grid,
    block, args)`` -- in the tests, the CPU emulator (``tests/test_cuda_kernels.py``).

    Scalars must be numpy scalars of the kernel's parameter type (CuPy needs the exact width;
    checking here keeps the CuPy path honest). ``memory_limit`` simulates a device of that many
    bytes: a chunk allocating more raises ``DeviceOutOfMemory``. Fresh arrays are filled with
    0xCD bytes, so a kernel reading memory nobody wrote shows up as a wrong result.
    """

    xp = np
    kind = "array"

    def __init__(self, launch: Callable, *, block: int = 64, max_blocks: int = 4,
                 scan_block: int = 256, scan_items: int = 8, memory_limit: "int | None" = None,
                 name: str = "array device", caps: Capabilities = Capabilities()):
        self._launch = launch
        self.block, self.max_blocks = block, max_blocks
        self.scan_block, self.scan_items = scan_block, scan_items
        self.memory_limit = memory_limit
        self.name = name
        self.caps = caps  # a GPU's by default; a test may state fewer
        self.oom_errors = (DeviceOutOfMemory,)
        self._used = 0
        self.launches: collections.Counter = collections.Counter()

    def defines(self) -> tuple:
        """The launch-shape defines a module is built with (the emulator builds with these)."""
        return (("ENC_SCAN_BLOCK", self.scan_block), ("ENC_SCAN_ITEMS", self.scan_items))

    def launch(self, name, grid, block, args) -> None:
        for k, a in enumerate(args):
            if not isinstance(a, (np.ndarray, np.generic)):
                raise TypeError(f"{name}: argument {k} is a {type(a).__name__}; pass numpy "
                                "arrays and numpy scalars of the parameter's exact type")
        self.launches[name] += 1
        self._launch(name, tuple(grid), tuple(block), list(args))

    def _take(self, nbytes: int) -> None:
        self._used += int(nbytes)
        if self.memory_limit is not None and self._used > self.memory_limit:
            raise DeviceOutOfMemory(f"simulated device memory exhausted ({self._used} bytes > "
                                    f"{self.memory_limit})")

    def empty(self, n, dtype):
        a = np.empty(int(n), dtype)
        self._take(a.nbytes)
        a.view(np.uint8).fill(0xCD)
        return a

    def zeros(self, n, dtype):
        a = np.zeros(int(n), dtype)
        self._take(a.nbytes)
        return a

    def full(self, n, value, dtype):
        a = np.full(int(n), value, dtype)
        self._take(a.nbytes)
        return a

    def dummy(self, dtype):
        return np.zeros(1, dtype)

    def put(self, host):
        return np.array(host, copy=True)

    def memory_budget(self) -> int:
        return self.memory_limit if self.memory_limit is not None else 1 << 34

    def begin_chunk(self, nbytes: int = 0) -> None:
        self._used = 0

    def release(self) -> None:
        self._used = 0

    def synchronize(self) -> None:
        pass

    @contextlib.contextmanager
    def stream(self, slot: int):
        yield

    def upload(self, arrays: list) -> list:
        out = []
        for a in arrays:
            self._take(a.nbytes)
            out.append(np.array(a, copy=True))
        return out

    def download(self, key, arr, count) -> Ready:
        return Ready(np.array(arr[:int(count)], copy=True))

    def mark(self):
        return time.perf_counter()

    def elapsed_ms(self, a, b) -> float:
        return (b - a) * 1e3
