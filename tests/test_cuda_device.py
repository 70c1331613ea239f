"""The CUDA device adapter (``gputok/backends/cuda/device.py``) on a stand-in for CuPy
(``fakecupy.py``: the kernels run on the emulator): each GPU sized and freed from its own
context, whichever GPU the calling thread has current; the memory cap; the pools given back after
a batch unless held; events that block instead of spinning; every CUDA out-of-memory form split
on. A real GPU runs the same adapter in ``test_cuda_gpu.py``.
"""

from __future__ import annotations

import sys

import pytest

import gputok
from conftest import tiktoken_oracle
from devicekit import assert_same, corpus_snippets
from fakecupy import fake_cupy
from gputok.backends import cuda
from gputok.backends.cuda import build as cuda_build
from gputok.backends.cuda.device import CudaOutOfMemory, parse_memory
from gputok.backends.driver import DeviceBackend


@pytest.fixture
def stand_in(monkeypatch):
    """(make, log): ``make(devices=2, fail=None)`` installs a stand-in CuPy and returns its log
    of memory calls; the compiled-module cache is cleared around the test."""
    log: list = []

    def make(devices: int = 2, fail=None, free: int = 1 << 30):
        monkeypatch.setitem(sys.modules, "cupy", fake_cupy([], devices=devices, free=free,
                                                           log=log, fail=fail))
        monkeypatch.setattr(cuda, "_no_driver", lambda: False)
        return log

    cuda_build._cupy_module.cache_clear()
    yield make
    cuda_build._cupy_module.cache_clear()


def small(dev):
    dev.block, dev.max_blocks = 64, 2  # keep the emulated grids small
    return dev


def docs_and_ids(name="r50k_base"):
    docs = list(corpus_snippets(2, 600)) + ["", "a" * 300]
    return docs, [tiktoken_oracle(name).encode_ordinary(d) for d in docs]


def test_memory_is_sized_and_freed_on_the_adapters_own_gpu(stand_in):
    """GPU 1's adapter asks GPU 1 how much is free and frees GPU 1's blocks, while the thread
    has GPU 0 current (before: GPU 0 was sized and freed for every adapter)."""
    log = stand_in(devices=2)
    dev = cuda.CupyDevice(1)
    import cupy

    with cupy.cuda.Device(0):
        log.clear()
        assert dev.memory_budget() > 0
        dev.release()
        dev.empty(10, "uint32")
    sized = [e for e in log if e[0] in ("memGetInfo", "pool.free_bytes", "pool.free_all_blocks")]
    assert sized and all(e[1] == 1 for e in sized), sized
    allocs = [e for e in log if e[0] == "alloc"]
    assert allocs and all(e[1] == 1 and e[2] == dev._pool.malloc for e in allocs), allocs


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_memory_cap_bounds_the_budget_and_the_pool(stand_in, monkeypatch, how):
    log = stand_in(devices=1, free=8 << 30)
    if how == "environment":
        monkeypatch.setenv("GPUTOK_CUDA_MEMORY", "64M")
        dev = cuda.CupyDevice(0)
    else:
        dev = cuda.CupyDevice(0, memory="64M")
    assert dev.memory == 64 << 20
    assert ("pool.set_limit", 0, 64 << 20) in log
    assert dev.memory_budget() == (64 << 20) - (1 << 10)  # the cap less the pool's use
    monkeypatch.delenv("GPUTOK_CUDA_MEMORY", raising=False)
    assert cuda.CupyDevice(0).memory_budget() == (8 << 30) + (1 << 20)  # no cap: free + cached
    be = cuda.create(0, memory=1 << 30)
    assert be.dev.memory == 1 << 30


def test_memory_caps_parse_or_say_why():
    assert parse_memory("1.5G") == 3 << 29 and parse_memory("2048") == 2048
    assert parse_memory("16gb") == 16 << 30 and parse_memory(None) is None
    for bad in ("lots", "-1G", "0", "12X"):
        with pytest.raises(ValueError, match="GPUTOK_CUDA_MEMORY|positive"):
            parse_memory(bad)


def test_pools_are_given_back_after_a_batch_unless_held(stand_in):
    """After a batch the adapter's device pool and pinned staging go back (a model training in
    the same process gets them); inside ``holding()`` (a corpus job) they stay until its end."""
    log = stand_in(devices=1)
    be = DeviceBackend(small(cuda.CupyDevice(0)), chunk_bytes=1500)
    enc = gputok.get_encoding("r50k_base")
    docs, want = docs_and_ids()
    log.clear()
    assert_same(enc, be, docs, want)
    gave = [e[0] for e in log if e[0] in ("pool.free_all_blocks", "pinned.free_all_blocks")]
    assert gave[-2:] == ["pool.free_all_blocks", "pinned.free_all_blocks"]
    assert not be.dev._pinned
    log.clear()
    with be.holding():
        assert_same(enc, be, docs, want)
        assert_same(enc, be, docs, want)
        assert not any(e[0].endswith("free_all_blocks") for e in log)
        assert be.dev._pinned  # the staging kept for the next batch
    assert [e[0] for e in log if e[0].endswith("free_all_blocks")] == [
        "pool.free_all_blocks", "pinned.free_all_blocks"]


def test_waits_block_instead_of_spinning(stand_in):
    """Every event the adapter makes blocks the waiting thread; only the profile's marks
    time (before: default events, whose waits spin a core)."""
    log = stand_in(devices=1)
    be = DeviceBackend(small(cuda.CupyDevice(0)), chunk_bytes=1500)
    be.profile = []
    docs, want = docs_and_ids()
    assert_same(gputok.get_encoding("r50k_base"), be, docs, want)
    events = [e for e in log if e[0] == "event"]
    assert events and all(block for _, block, _ in events)
    assert {timing for _, _, timing in events} == {True, False}  # copies untimed, marks timed


def test_a_failed_pinned_allocation_splits_the_batch(stand_in):
    """CUDA's runtime reports a failed pinned allocation as CUDARuntimeError
    (cudaErrorMemoryAllocation), not as CuPy's OutOfMemoryError: the adapter makes it one the
    driver splits on (before: the error ended the batch)."""
    fail = {"pinned": 1}
    stand_in(devices=1, fail=fail)
    be = DeviceBackend(small(cuda.CupyDevice(0)), chunk_bytes=4000, min_chunk=256)
    docs, want = docs_and_ids()
    assert_same(gputok.get_encoding("r50k_base"), be, docs, want)
    assert fail["pinned"] == 0 and not be.fallbacks  # split and retried on the device


def test_other_cuda_errors_are_not_taken_for_out_of_memory(stand_in):
    stand_in(devices=1)
    dev = cuda.CupyDevice(0)
    import cupy

    with pytest.raises(CudaOutOfMemory):
        with dev._on_device():
            raise cupy.cuda.driver.CUDADriverError(2)  # CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(cupy.cuda.runtime.CUDARuntimeError):
        with dev._on_device():
            raise cupy.cuda.runtime.CUDARuntimeError(700)  # an illegal address: not memory
    assert CudaOutOfMemory in dev.oom_errors


# ---------------------------------------------------------------- the host path (staging)

def staged_backend(stand_in, chunk_bytes=2000):
    log = stand_in(devices=1)
    be = DeviceBackend(small(cuda.CupyDevice(0)), chunk_bytes=chunk_bytes)
    assert be.staged is not None and be.tools.packer is not None
    return be, log


def test_str_and_bytes_batches_are_packed_straight_into_staging(stand_in):
    """A str (or bytes) batch on a GPU: each chunk's UTF-8 written by the native packer into
    its stream slot's pinned staging and uploaded from there (not copied again), its ids copied
    from the download buffer into their place in the output; the ids are tiktoken's for every
    kind of str (surrogates repaired as tiktoken does, empty documents) over several chunks."""
    from gputok.stages import counters
    from gputok.stages.pack import utf8_of

    be, log = staged_backend(stand_in)
    enc, tk = gputok.get_encoding("r50k_base"), tiktoken_oracle("r50k_base")
    docs = list(corpus_snippets(3, 700)) + ["", "a\ud83d\ude00 \ud800 x", "caf\u00e9 " * 90, ""]
    want = [tk.encode_ordinary(d) for d in docs]
    for batch in (docs, [utf8_of(d) for d in docs]):  # (tiktoken's repair of a surrogate)
        before = counters["device.staged_batches"]
        ids, off = be.encode(enc.model, gputok.stages.pack.Documents(batch), frozenset(),
                             frozenset())
        assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(docs))] == want
        assert counters["device.staged_batches"] == before + 1
        assert off[-1] == len(ids) and len(off) == len(docs) + 1
    # every chunk's text goes up from its staging buffer: only the small arrays are copied,
    # through buffers of their own ("in_rest"; the batch path copies all into "in")
    copied = []
    upload = be.dev.upload

    def spy(arrays):
        copied.append(arrays[0].ctypes.data == be.dev._pinned[("in", be.dev._slot)][1].ctypes.data)
        return upload(arrays)

    be.dev.upload = spy
    with be.holding():
        ids, off = be.encode(enc.model, gputok.stages.pack.Documents(docs), frozenset(),
                             frozenset())
        assert ("in_rest", 0) in be.dev._pinned
    assert len(copied) > 2 and all(copied)


def test_staged_batches_refuse_what_the_batch_path_refuses(stand_in):
    """A disallowed special token in a later chunk raises the batch path's error for the same
    document; an invalid UTF-8 bytes document is named by the batch path; a batch with tokens
    allowed takes the batch path (tokens are found over the whole batch there)."""
    from gputok.specials import DisallowedSpecialError
    from gputok.stages import counters
    from gputok.stages.pack import Documents

    be, _ = staged_backend(stand_in, chunk_bytes=1000)
    enc = gputok.get_encoding("r50k_base")
    docs = list(corpus_snippets(2, 600))
    bad = docs[:5] + ["x <|endoftext|> y"] + docs[5:]
    with pytest.raises(DisallowedSpecialError) as got:
        be.encode(enc.model, Documents(bad), frozenset(), enc.special_tokens_set)
    assert getattr(got.value, "doc", None) == 5
    raw = [d.encode() for d in docs[:3]] + [b"ok \xff bad"] + [d.encode() for d in docs[3:]]
    with pytest.raises(ValueError, match="document 3 is not valid UTF-8"):
        be.encode(enc.model, Documents(raw), frozenset(), frozenset())
    before = counters["device.staged_batches"]
    ids, off = be.encode(enc.model, Documents(bad), enc.special_tokens_set, frozenset())
    assert counters["device.staged_batches"] == before
    tk = tiktoken_oracle("r50k_base")
    assert ids[off[5]:off[6]].tolist() == tk.encode(bad[5], allowed_special="all")


def test_a_borrowed_download_is_placed_at_once_or_kept_as_a_copy():
    """``Placement.place(..., borrowed=True)``: a download buffer the next chunk reuses is
    copied in during the call, or kept as a copy when an earlier chunk is not placed yet."""
    import numpy as np

    from gputok.stages.emit import Placement

    p = Placement(np.zeros(8, np.uint32))
    buf = np.array([3, 4], np.uint32)
    p.place(1, buf, borrowed=True)
    buf[:] = 9  # the buffer reused
    p.place(0, np.array([1, 2], np.uint32), borrowed=True)
    assert p.ids().tolist() == [1, 2, 3, 4]
