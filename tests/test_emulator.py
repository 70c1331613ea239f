"""Tests of the CPU kernel emulator (tests/emulator) itself, with small kernels written here.

The project's real kernels are checked against the numpy reference by their own tests; these make
sure the emulator gets barriers, shared memory, warp collectives, atomics, scheduling orders and
error reporting right, so that a passing kernel test means something.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from emulator import CompileError, KernelError, compile_cuda, compile_metal

ORDERS = ("forward", "reverse", "shuffle")

CUDA_SOURCE = r"""
#include <cstdint>

// ---- block reduction in static shared memory
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out,
                                     unsigned n) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x;
  const unsigned i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// ---- histogram with atomics (global and shared)
extern "C" __global__ void histogram(const uint8_t* data, unsigned n, unsigned* bins) {
  __shared__ unsigned local[16];
  if (threadIdx.x < 16) local[threadIdx.x] = 0;
  __syncthreads();
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&local[data[i] & 15u], 1u);
  __syncthreads();
  if (threadIdx.x < 16) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}

// ---- warp shuffles and votes
extern "C" __global__ void warp_ops(const int* x, int* sums, unsigned* ballots, int* allsum,
                                    int* bcast, int* incl) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned lane = threadIdx.x & 31u, warp = i / 32u;
  int v = x[i];
  int s = v;
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) sums[warp] = s;
  unsigned b = __ballot_sync(0xffffffffu, v & 1);
  if (lane == 0) ballots[warp] = b;
  int a = v;
  for (int m = 1; m < 32; m <<= 1) a += __shfl_xor_sync(0xffffffffu, a, m);
  allsum[i] = a;
  bcast[i] = __shfl_sync(0xffffffffu, v, 7);
  int c = v;
  for (int d = 1; d < 32; d <<= 1) {
    int up = __shfl_up_sync(0xffffffffu, c, d);
    if ((int)lane >= d) c += up;
  }
  incl[i] = c;
}

// ---- Blelloch exclusive scan of 2*blockDim elements per block
extern "C" __global__ void blelloch_scan(const unsigned* in, unsigned* out) {
  __shared__ unsigned temp[512];
  const unsigned t = threadIdx.x, n = 2 * blockDim.x, base = blockIdx.x * n;
  temp[2 * t] = in[base + 2 * t];
  temp[2 * t + 1] = in[base + 2 * t + 1];
  unsigned offset = 1;
  for (unsigned d = n >> 1; d > 0; d >>= 1) {
    __syncthreads();
    if (t < d) {
      unsigned ai = offset * (2 * t + 1) - 1, bi = offset * (2 * t + 2) - 1;
      temp[bi] += temp[ai];
    }
    offset <<= 1;
  }
  if (t == 0) temp[n - 1] = 0;
  for (unsigned d = 1; d < n; d <<= 1) {
    offset >>= 1;
    __syncthreads();
    if (t < d) {
      unsigned ai = offset * (2 * t + 1) - 1, bi = offset * (2 * t + 2) - 1;
      unsigned tmp = temp[ai];
      temp[ai] = temp[bi];
      temp[bi] += tmp;
    }
  }
  __syncthreads();
  out[base + 2 * t] = temp[2 * t];
  out[base + 2 * t + 1] = temp[2 * t + 1];
}

// ---- dynamic shared memory
extern "C" __global__ void reverse_block(const int* in, int* out) {
  extern __shared__ __align__(16) int buf[];
  const unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  buf[t] = in[i];
  __syncthreads();
  out[i] = buf[blockDim.x - 1 - t];
}

// ---- barrier misuse
extern "C" __global__ void divergent_barrier(int* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

extern "C" __global__ void early_exit(int* out, int n) {
  if ((int)threadIdx.x >= n) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

extern "C" __global__ void shfl_after_exit(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
}

// ---- races the scheduling order exposes
extern "C" __global__ void last_writer(int* out) {
  __shared__ int winner;
  winner = threadIdx.x;  // racy on purpose: every thread writes
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = winner;
}

extern "C" __global__ void tickets(unsigned* counter, unsigned* order) {
  unsigned t = atomicAdd(counter, 1u);
  order[blockIdx.x * blockDim.x + threadIdx.x] = t;
}

extern "C" __global__ void lost_update(int* counter) {
  int v = *counter;  // racy read-modify-write around a fence
  __threadfence();
  *counter = v + 1;
}

// ---- faults
extern "C" __global__ void out_of_bounds(int* out) { out[(long long)threadIdx.x << 40] = 1; }
extern "C" __global__ void checks(const int* x, int* out) {
  assert(x[threadIdx.x] >= 0);
  out[threadIdx.x] = x[threadIdx.x];
}
extern "C" __global__ void syncthreads_count(const int* x, int* out) {
  int c = __syncthreads_count(x[threadIdx.x] > 0);
  int a = __syncthreads_and(x[threadIdx.x] > 0);
  int o = __syncthreads_or(x[threadIdx.x] > 0);
  out[threadIdx.x] = c * 100 + a * 10 + o;
}

// ---- scalar argument types and intrinsics
extern "C" __global__ void scalars(unsigned long long* out, unsigned long long a, int b, float c,
                                   unsigned char d) {
  if (threadIdx.x == 0) {
    out[0] = a;
    out[1] = (unsigned long long)(long long)b;
    out[2] = (unsigned long long)(c * 2.0f);
    out[3] = d;
    out[4] = __popc(0xF0F0u) + 100 * __clz(1) + 10000 * __ffs(8);
    out[5] = max(3, 7u) + min(-1LL, 5LL) + 0ull;
    out[6] = blockDim.x * 1000000ull + blockDim.y * 1000ull + blockDim.z;
  }
}
"""


@pytest.fixture(scope="module")
def cuda(tmp_path_factory):
    path = tmp_path_factory.mktemp("emu") / "emulator_selftest.cu"
    path.write_text(CUDA_SOURCE)
    return compile_cuda(path)


# ------------------------------------------------------------------------------- CUDA

def test_kernels_found(cuda):
    assert {"block_sum", "histogram", "warp_ops", "blelloch_scan", "reverse_block"} <= set(
        cuda.kernels)
    assert [repr(p) for p in cuda.params("block_sum")] == ["const float32*", "float32*", "uint32"]


@pytest.mark.parametrize("order", ORDERS)
def test_block_reduction(cuda, order):
    rng = np.random.default_rng(1)
    n = 1000
    x = rng.random(n, dtype=np.float32)
    out = np.zeros(4, np.float32)
    cuda.launch("block_sum", 4, 256, [x, out, n], order=order, seed=3)
    ref = [x[i * 256:(i + 1) * 256].sum(dtype=np.float64) for i in range(4)]
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    assert cuda.barriers_released() == 4 * 9  # 1 + log2(256) barriers per block


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("yield_on_atomic", [False, True])
def test_atomic_histogram(cuda, order, yield_on_atomic):
    data = np.random.default_rng(2).integers(0, 256, 5000, dtype=np.uint8)
    bins = np.zeros(16, np.uint32)
    cuda.launch("histogram", 3, 128, [data, len(data), bins], order=order,
                yield_on_atomic=yield_on_atomic)
    np.testing.assert_array_equal(bins, np.bincount(data & 15, minlength=16))


@pytest.mark.parametrize("order", ORDERS)
def test_warp_shuffles_and_ballot(cuda, order):
    x = np.random.default_rng(3).integers(-1000, 1000, 128, dtype=np.int32)
    sums = np.zeros(4, np.int32)
    ballots = np.zeros(4, np.uint32)
    allsum, bcast, incl = (np.zeros(128, np.int32) for _ in range(3))
    cuda.launch("warp_ops", 2, 64, [x, sums, ballots, allsum, bcast, incl], order=order)
    w = x.reshape(4, 32)
    np.testing.assert_array_equal(sums, w.sum(1))
    bits = (w & 1).astype(bool)
    np.testing.assert_array_equal(ballots, [sum(1 << i for i in range(32) if r[i]) for r in bits])
    np.testing.assert_array_equal(allsum, np.repeat(w.sum(1), 32))
    np.testing.assert_array_equal(bcast, np.repeat(w[:, 7], 32))
    np.testing.assert_array_equal(incl, np.cumsum(w, axis=1).ravel())


@pytest.mark.parametrize("order", ORDERS)
def test_blelloch_scan(cuda, order):
    x = np.random.default_rng(4).integers(0, 100, 4 * 512, dtype=np.uint32)
    out = np.zeros_like(x)
    cuda.launch("blelloch_scan", 4, 256, [x, out], order=order, seed=11)
    blocks = x.reshape(4, 512)
    ref = np.concatenate([np.r_[0, np.cumsum(b)[:-1]] for b in blocks]).astype(np.uint32)
    np.testing.assert_array_equal(out, ref)


def test_dynamic_shared_memory(cuda):
    x = np.arange(3 * 96, dtype=np.int32)
    out = np.zeros_like(x)
    cuda.launch("reverse_block", 3, 96, [x, out], shared_bytes=96 * 4, order="shuffle")
    np.testing.assert_array_equal(out, x.reshape(3, 96)[:, ::-1].ravel())


def test_shared_memory_is_poisoned_between_blocks(cuda):
    # reverse_block with too little dynamic shared memory still runs (the buffer is fixed), but
    # a kernel that reads shared memory nobody wrote sees the poison byte, not zeros
    src = r"""extern "C" __global__ void uninit(unsigned* out) {
        __shared__ unsigned s[8];
        if (threadIdx.x == 0) out[blockIdx.x] = s[3];
    }"""
    m = compile_cuda(src)
    out = np.zeros(2, np.uint32)
    m.launch("uninit", 2, 32, [out])
    assert (out == 0xCDCDCDCD).all()
    m.launch("uninit", 2, 32, [out], shared_fill=0)
    assert (out == 0).all()


def test_divergent_barrier_is_reported(cuda):
    out = np.zeros(64, np.int32)
    t0 = time.monotonic()
    with pytest.raises(KernelError, match="divergent barriers"):
        cuda.launch("divergent_barrier", 1, 64, [out])
    assert time.monotonic() - t0 < 5


def test_barrier_after_early_return(cuda):
    out = np.zeros(64, np.int32)
    with pytest.raises(KernelError, match="reached by 10 of the block's 64 threads"):
        cuda.launch("early_exit", 1, 64, [out, 10])
    cuda.launch("early_exit", 1, 64, [out, 10], allow_exited_at_barrier=True)
    assert out.sum() == 10


def test_warp_collective_deadlock_is_reported(cuda):
    with pytest.raises(KernelError, match="deadlock.*__shfl_sync.*returned"):
        cuda.launch("shfl_after_exit", 1, 32, [np.zeros(32, np.int32)])


def test_orders_expose_races(cuda):
    res = {}
    for order in ORDERS:
        out = np.zeros(2, np.int32)
        cuda.launch("last_writer", 2, 128, [out], order=order, seed=5)
        res[order] = out.tolist()
    assert res["forward"] == [127, 127]
    assert res["reverse"] == [0, 0]
    shuffled = set()
    for seed in range(4):
        out = np.zeros(2, np.int32)
        cuda.launch("last_writer", 2, 128, [out], order="shuffle", seed=seed)
        shuffled.update(out.tolist())
    assert len(shuffled) > 1  # seeds give different interleavings
    out2 = np.zeros(2, np.int32)
    cuda.launch("last_writer", 2, 128, [out2], order="shuffle", seed=5)
    assert out2.tolist() == res["shuffle"]  # and a seed reproduces its interleaving


def test_orders_change_atomic_interleaving(cuda):
    got = {}
    for order in ORDERS:
        counter = np.zeros(1, np.uint32)
        order_out = np.zeros(2 * 64, np.uint32)
        cuda.launch("tickets", 2, 64, [counter, order_out], order=order, seed=1)
        assert counter[0] == 128
        assert sorted(order_out.tolist()) == list(range(128))
        got[order] = order_out.tolist()
    assert got["forward"] == list(range(128))
    assert got["reverse"] == list(range(127, -1, -1))
    assert got["shuffle"] not in (got["forward"], got["reverse"])


def test_yield_on_atomic_exposes_lost_updates(cuda):
    counter = np.zeros(1, np.int32)
    cuda.launch("lost_update", 1, 64, [counter])
    assert counter[0] == 64  # each thread runs to completion: the race stays hidden
    counter[0] = 0
    cuda.launch("lost_update", 1, 64, [counter], yield_on_atomic=True)
    assert counter[0] == 1  # every thread read before anyone wrote


def test_faults_and_asserts_are_errors(cuda):
    with pytest.raises(KernelError, match="invalid memory access"):
        cuda.launch("out_of_bounds", 1, 4, [np.zeros(4, np.int32)])
    x = np.array([1, 2, -3, 4], np.int32)
    with pytest.raises(KernelError, match=r"thread \(2,0,0\).*assertion"):
        cuda.launch("checks", 1, 4, [x, np.zeros(4, np.int32)])
    out = np.zeros(4, np.int32)
    cuda.launch("checks", 1, 4, [np.abs(x), out])  # the module still works after an error
    np.testing.assert_array_equal(out, np.abs(x))


def test_syncthreads_reductions(cuda):
    x = np.array([1, 0, 3, 4, 5, 0, 7, 8], np.int32)
    out = np.zeros(8, np.int32)
    cuda.launch("syncthreads_count", 1, 8, [x, out], order="reverse")
    assert (out == 6 * 100 + 0 * 10 + 1).all()


def test_scalar_arguments(cuda):
    out = np.zeros(8, np.uint64)
    cuda.launch("scalars", 1, (4, 2, 3), [out, ("u64", 2**40 + 1), -5, 1.25, np.uint8(200)])
    assert out[:7].tolist() == [2**40 + 1, 2**64 - 5, 2, 200, 8 + 100 * 31 + 10000 * 4,
                                6, 4_002_003]
    with pytest.raises(TypeError, match="typed u64"):
        cuda.launch("scalars", 1, 1, [out, 1, ("u64", 3), 1.0, 1])
    with pytest.raises(OverflowError):
        cuda.launch("scalars", 1, 1, [out, 1, 2, 1.0, 256])
    with pytest.raises(TypeError, match="takes 5 arguments"):
        cuda.launch("scalars", 1, 1, [out])


def test_array_argument_checks(cuda):
    x = np.zeros(1000, np.float64)
    with pytest.raises(TypeError, match="dtype float64"):
        cuda.launch("block_sum", 1, 256, [x, np.zeros(1, np.float32), 1000])
    with pytest.raises(ValueError, match="C-contiguous"):
        cuda.launch("block_sum", 1, 256, [np.zeros(2000, np.float32)[::2],
                                          np.zeros(1, np.float32), 1000])
    ro = np.zeros(1, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cuda.launch("block_sum", 1, 256, [np.zeros(10, np.float32), ro, 10])
    with pytest.raises(ValueError, match="order"):
        cuda.launch("block_sum", 1, 256, [np.zeros(10, np.float32), np.zeros(1, np.float32), 10],
                    order="backwards")


def test_many_threads_are_cheap(cuda):
    n = 65536
    x = np.ones(n, np.float32)
    out = np.zeros(n // 256, np.float32)
    t0 = time.monotonic()
    cuda.launch("block_sum", n // 256, 256, [x, out, n], order="shuffle")
    elapsed = time.monotonic() - t0
    assert (out == 256).all()
    assert elapsed < 10, f"64K threads with 9 barriers each took {elapsed:.1f}s"


def test_compile_errors_show_compiler_output(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k(int* o) { o[0] = undefined_name; }\n')
    with pytest.raises(CompileError, match="undefined_name"):
        compile_cuda(bad)


def test_compile_cache_and_defines(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text('#include "k.cuh"\nextern "C" __global__ void k(int* o) { o[0] = VALUE + '
                   'FROM_HEADER; }\n')
    (tmp_path / "k.cuh").write_text("#define FROM_HEADER 100\n")
    out = np.zeros(1, np.int32)
    compile_cuda(src, defines={"VALUE": 1}).launch("k", 1, 1, [out])
    assert out[0] == 101
    t0 = time.monotonic()
    m = compile_cuda(src, defines={"VALUE": 1})
    assert time.monotonic() - t0 < 0.5  # cached
    (tmp_path / "k.cuh").write_text("#define FROM_HEADER 200\n")  # a header change rebuilds
    compile_cuda(src, defines={"VALUE": 2}).launch("k", 1, 1, [out])
    assert out[0] == 202
    m.launch("k", 1, 1, [out])
    assert out[0] == 101


def test_cupy_like_function(cuda):
    f = cuda.get_function("reverse_block")
    x = np.arange(64, dtype=np.int32)
    out = np.zeros_like(x)
    f((1,), (64,), (x, out), shared_mem=256)
    np.testing.assert_array_equal(out, x[::-1])


# ------------------------------------------------------------------------------- Metal

REDUCE_BODY = """
    threadgroup T partial[256];
    threadgroup atomic_uint arrivals;
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint n = inp_shape[0];
    if (lid == 0) atomic_store_explicit(&arrivals, 0u, memory_order_relaxed);
    partial[lid] = gid < n ? inp[gid] : T(0);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&arrivals, 1u, memory_order_relaxed);
    for (uint s = threads_per_threadgroup.x / 2; s > 0; s >>= 1) {
        if (lid < s) partial[lid] += partial[lid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0) {
        atomic_fetch_add_explicit(&total[0], partial[0], memory_order_relaxed);
        atomic_store_explicit(&sums[threadgroup_position_in_grid.x], partial[0],
                              memory_order_relaxed);
        atomic_store_explicit(&counts[threadgroup_position_in_grid.x],
                              atomic_load_explicit(&arrivals, memory_order_relaxed),
                              memory_order_relaxed);
    }
"""


@pytest.fixture(scope="module")
def metal_reduce():
    return compile_metal("tg_reduce", ["inp"], ["total", "sums", "counts"], REDUCE_BODY,
                         atomic_outputs=True)


@pytest.mark.parametrize("order", ORDERS)
def test_metal_threadgroup_reduction(metal_reduce, order):
    x = np.random.default_rng(5).integers(0, 1000, 1024, dtype=np.uint32)
    total, sums, counts = metal_reduce(
        inputs=[x], output_shapes=[(1,), (4,), (4,)], output_dtypes=[np.uint32] * 3,
        grid=(1024, 1, 1), threadgroup=(256, 1, 1), template=[("T", np.uint32)], init_value=0,
        order=order, yield_on_atomic=order == "shuffle")
    assert total[0] == x.sum()
    np.testing.assert_array_equal(sums, x.reshape(4, 256).sum(1))
    assert (counts == 256).all()
    assert metal_reduce.barriers_released() == 4 * 9


def test_metal_signature_mirrors_mlx(metal_reduce):
    """The Metal text MLX 0.32 writes around a body (tests/test_metal_fidelity.py compares it
    with MLX itself); the emulator compiles this text, template arguments bound."""
    name, src = metal_reduce.metal_source([(np.uint32, 1, 1024)], [np.uint32] * 3,
                                          [("T", np.uint32)])
    assert name == "custom_kernel_tg_reduce__uint32_t_uint32_t_uint32_t_uint32_t_uint32_t"
    assert src.startswith(
        "template <typename T>\n[[kernel]] void " + name + "(\n"
        "  const device uint32_t* inp [[buffer(0)]],\n"
        "  const constant int* inp_shape [[buffer(1)]],\n"
        "  device atomic<uint32_t>* total [[buffer(2)]],\n")
    assert "  uint3 thread_position_in_grid [[thread_position_in_grid]]" in src
    assert src.endswith(f"decltype({name}<uint32_t>) {name}<uint32_t>;\n\n")
    assert "inp_strides" not in src and "thread_index_in_simdgroup" not in src
    # a small input is in the constant address space
    _, small = metal_reduce.metal_source([(np.uint32, 1, 7)], [np.uint32] * 3, [("T", np.uint32)])
    assert "  const constant uint32_t* inp [[buffer(0)]],\n" in small
    tu = metal_reduce.generate([(np.uint32, 1)], [np.uint32] * 3, [("T", np.uint32)])
    assert "GPUEMU_SHARED T partial[256];" in tu


def test_metal_partial_threadgroups_and_init_value():
    body = """
        uint gid = thread_position_in_grid.x;
        out[gid] = threads_per_threadgroup.x * 1000 + threadgroup_position_in_grid.x;
        if (gid == 0) extra[0] = threadgroups_per_grid.x;
    """
    k = compile_metal("edges", ["unused"], ["out", "extra"], body)
    out, extra = k(inputs=[np.zeros(1, np.float32)], output_shapes=[(300,), (2,)],
                   output_dtypes=[np.uint32, np.uint32], grid=(300, 1, 1),
                   threadgroup=(128, 1, 1), init_value=7)
    expect = np.array([128_000] * 128 + [128_001] * 128 + [44_002] * 44, np.uint32)
    np.testing.assert_array_equal(out, expect)
    assert extra.tolist() == [3, 7]


def test_metal_simd_functions():
    body = """
        uint gid = thread_position_in_grid.x;
        int v = x[gid];
        sum[gid] = simd_sum(v);
        excl[gid] = simd_prefix_exclusive_sum(v);
        down[gid] = simd_shuffle_down(v, 1);
        simd_vote b = simd_ballot((v & 1) != 0);
        if (thread_index_in_simdgroup == 0)
            vote[gid / 32] = uint(static_cast<simd_vote::vote_t>(b));
        maxv[gid] = simd_max(v);
    """
    k = compile_metal("simd", ["x"], ["sum", "excl", "down", "vote", "maxv"], body)
    x = np.random.default_rng(6).integers(-50, 50, 64, dtype=np.int32)
    s, e, d, vote, mx = k(inputs=[x], output_shapes=[(64,)] * 3 + [(2,), (64,)],
                          output_dtypes=[np.int32] * 3 + [np.uint32, np.int32],
                          grid=(64, 1, 1), threadgroup=(64, 1, 1), order="reverse")
    w = x.reshape(2, 32)
    np.testing.assert_array_equal(s, np.repeat(w.sum(1), 32))
    np.testing.assert_array_equal(e, np.concatenate([np.r_[0, np.cumsum(r)[:-1]] for r in w]))
    np.testing.assert_array_equal(d, np.concatenate([np.r_[r[1:], r[-1]] for r in w]))
    np.testing.assert_array_equal(vote, [sum(1 << i for i in range(32) if r[i] & 1) for r in w])
    np.testing.assert_array_equal(mx, np.repeat(w.max(1), 32))


def test_metal_strided_inputs_and_helpers():
    header = "METAL_FUNC float twice(float v) { return 2.0f * v; }\n"
    body = """
        uint elem = thread_position_in_grid.x;
        auto loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
        out[elem] = twice(inp[loc]) + metal::max(0.0f, -1.0f);
    """
    k = compile_metal("strided", ["inp"], ["out"], body, header=header,
                      ensure_row_contiguous=False)
    a = np.arange(48, dtype=np.float32).reshape(6, 8)[::2, 1::3]  # not contiguous
    (out,) = k(inputs=[a], output_shapes=[a.shape], output_dtypes=[np.float32],
               grid=(a.size, 1, 1), threadgroup=(32, 1, 1))
    np.testing.assert_array_equal(out, 2 * a)


def test_metal_divergent_barrier_is_reported():
    body = """
        uint lid = thread_position_in_threadgroup.x;
        if (lid < 4) {
            threadgroup_barrier(mem_flags::mem_threadgroup);
        } else {
            threadgroup_barrier(mem_flags::mem_device);
        }
        out[lid] = lid;
    """
    k = compile_metal("bad_barrier", ["x"], ["out"], body)
    with pytest.raises(KernelError, match="divergent barriers.*threadgroup_barrier"):
        k(inputs=[np.zeros(1, np.int32)], output_shapes=[(8,)], output_dtypes=[np.int32],
          grid=(8, 1, 1), threadgroup=(8, 1, 1))


def test_metal_compile_error_is_reported():
    k = compile_metal("broken", ["x"], ["out"], "out[0] = x[0] + not_declared;")
    with pytest.raises(CompileError, match="not_declared"):
        k(inputs=[np.zeros(1, np.int32)], output_shapes=[(1,)], output_dtypes=[np.int32],
          grid=(1, 1, 1), threadgroup=(1, 1, 1))
