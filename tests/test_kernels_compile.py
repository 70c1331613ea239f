"""Compile checks of every kernel source: nvcc (PTX for sm_80 and sm_90) and the CPU emulator.

* every ``kernels/*.cu`` must compile with ``nvcc -ptx`` for both architectures (skipped, with the
  reason, when nvcc is not on PATH) and build for the emulator (g++ against cuda_shim.h);
* every ``shaders/*.metal`` body must compile through the emulator's MLX wrapper; a body declares
  its interface in a ``// gpuemu: ...`` comment (see ``emulator.metal_interface``).

CI (``.ci/run``) installs no CUDA toolkit, so there the nvcc checks skip with that reason; what
CI always compiles is what CuPy compiles, with NVRTC (``GPUTOK_REQUIRE_NVRTC``:
``tests/test_cuda_kernels.py`` and ``tests/test_train_kernels.py``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from emulator import check_metal_file, compile_cuda, metal_interface

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
SHADERS = ROOT / "shaders"
CU_FILES = sorted(KERNELS.glob("*.cu")) if KERNELS.is_dir() else []
METAL_FILES = sorted(SHADERS.glob("*.metal")) if SHADERS.is_dir() else []
ARCHS = ("sm_80", "sm_90")
NVCC = shutil.which("nvcc")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH (CUDA toolkit not "
                                                     "installed): PTX compile checks skipped")

TINY_KERNEL = r"""
extern "C" __global__ void tiny(const unsigned* in, unsigned* out, unsigned n) {
  __shared__ unsigned s[128];
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0u;
  __syncthreads();
  unsigned v = s[threadIdx.x] + __shfl_xor_sync(0xffffffffu, s[threadIdx.x], 1);
  if (i < n) atomicAdd(&out[i % 4], v);
}
"""


def nvcc_ptx(src: Path, arch: str, out_dir: Path) -> subprocess.CompletedProcess:
    cmd = [NVCC, "-ptx", f"-arch={arch}", "-std=c++17", f"-I{src.parent}",
           "-o", str(out_dir / f"{src.stem}.{arch}.ptx"), str(src)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_nvcc_compiles_a_tiny_kernel(tmp_path, arch):
    src = tmp_path / "tiny.cu"
    src.write_text(TINY_KERNEL)
    r = nvcc_ptx(src, arch, tmp_path)
    assert r.returncode == 0, r.stderr
    ptx = (tmp_path / f"tiny.{arch}.ptx").read_text()
    assert f".target {arch}" in ptx and ".entry tiny" in ptx


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("src", CU_FILES, ids=[p.name for p in CU_FILES])
def test_cuda_kernel_compiles_with_nvcc(tmp_path, src, arch):
    r = nvcc_ptx(src, arch, tmp_path)
    assert r.returncode == 0, f"nvcc -ptx -arch={arch} {src.name} failed:\n{r.stderr}"


@pytest.mark.parametrize("src", CU_FILES, ids=[p.name for p in CU_FILES])
def test_cuda_kernel_builds_for_the_emulator(src):
    mod = compile_cuda(src)
    for name in mod.kernels:
        mod.params(name)  # every kernel found has a launcher with a readable signature


@pytest.mark.parametrize("src", METAL_FILES, ids=[p.name for p in METAL_FILES])
def test_metal_body_compiles_through_the_emulator(src):
    if metal_interface(src.read_text()) is None:
        pytest.skip(f"{src.name} has no '// gpuemu: inputs=... outputs=...' interface comment, "
                    "so its MLX signature cannot be generated")
    assert check_metal_file(src) is not None


def test_emulator_wraps_a_metal_body_file(tmp_path):
    """The .metal path end to end, with a body file and a header file as the project lays them."""
    (tmp_path / "common.metal").write_text(
        "// gpuemu: header\n#include <metal_stdlib>\nusing namespace metal;\n"
        "METAL_FUNC uint mix3(uint a, uint b) { return a * 3u + b; }\n")
    body = tmp_path / "mix.metal"
    body.write_text(
        "// gpuemu: name=mix inputs=a:uint32,k:uint32:0 outputs=out:uint32 header=common.metal "
        "template=N:4\n"
        "uint i = thread_position_in_grid.x;\n"
        "if (i < a_shape[0]) out[i] = mix3(a[i], k) + N;\n")
    assert check_metal_file(tmp_path / "common.metal") is not None
    kern = check_metal_file(body)
    a = np.arange(10, dtype=np.uint32)
    (out,) = kern(inputs=[a, np.uint32(5)], output_shapes=[(10,)], output_dtypes=[np.uint32],
                  grid=(10, 1, 1), threadgroup=(4, 1, 1), template=[("N", 4)])
    np.testing.assert_array_equal(out, a * 3 + 5 + 4)


# ---------------------------------------------------------------- constants from one source

def _header_defaults() -> dict:
    """{name: value} of every ``#ifndef X / #define X v`` default in the encode kernels."""
    import re

    out = {}
    for f in (list(KERNELS.glob("encode_*.cu")) + list(KERNELS.glob("encode_*.cuh"))
              + list(KERNELS.glob("common/*.h"))):
        for name, val in re.findall(r"#ifndef (ENC_\w+)\n#define \1 ([^\s/]+)", f.read_text()):
            out[name] = int(val.rstrip("uUlL"), 0)
    return out


def test_kernel_constants_come_from_python():
    """Every constant the encode kernels share with Python is injected from its Python owner;
    the headers' #ifndef defaults (for compiling a file alone) equal those values."""
    import re

    from gputok.backends import kernels

    py = kernels.kernel_constants()
    defaults = _header_defaults()
    launch = {"ENC_SCAN_BLOCK", "ENC_SCAN_ITEMS"}  # launch shape: the device adapter's defines
    assert set(defaults) - launch == set(py), set(defaults) ^ set(py)
    assert {k: defaults[k] for k in py} == py
    # a kernel names no ENC_ constant that is neither injected nor defined in the sources
    used = set()
    local = set()
    for f in list(KERNELS.glob("encode_*")) + list(KERNELS.glob("common/*.h")):
        text = f.read_text()
        used |= set(re.findall(r"\b(ENC_[A-Z0-9_]+)\b", text))
        local |= set(re.findall(r"#define (ENC_[A-Z0-9_]+)", text))
    # (the host dialect defines the native device's own knobs, e.g. ENC_HOST_PREFETCH_AHEAD)
    local |= set(re.findall(r"#define (ENC_[A-Z0-9_]+)", (KERNELS / "dialect_host.h").read_text()))
    assert used <= local | set(py) | launch
    # the built source carries the values (what CuPy and the emulator compile)
    text = kernels.build_source("encode_merge.cu")[0]
    assert f"#define ENC_HASH_MUL {kernels.c_literal(py['ENC_HASH_MUL'])}" in text
    assert '#include "encode_common.cuh"' not in text  # headers expanded: the digest sees them


def test_changing_a_python_constant_changes_the_kernel_digest(monkeypatch):
    from gputok.backends import kernels

    before = kernels.build_source("encode_merge.cu")[1]
    kernels.kernel_constants.cache_clear()
    from gputok.stages import merge

    monkeypatch.setattr(merge, "LONG_PIECE", 512)
    try:
        after = kernels.build_source("encode_merge.cu")
        assert after[1] != before and "#define ENC_LONG_PIECE 512" in after[0]
    finally:
        kernels.kernel_constants.cache_clear()


def test_metal_shaders_take_the_python_constants_too(monkeypatch):
    """A Metal shader's header starts with the same ``#define`` block of Python's constants as
    the CUDA and native sources (one source for every dialect, not the headers' ``#ifndef``
    defaults): a changed constant reaches the header and the shader's digest."""
    from gputok.backends import kernels
    from gputok.backends.metal import iface

    shader = iface.load("encode_merge_short")
    block = kernels.defines_block(tuple(kernels.kernel_constants().items()))
    assert shader.header.startswith(block) and "#define ENC_LONG_PIECE " in block
    kernels.kernel_constants.cache_clear()
    from gputok.stages import merge

    monkeypatch.setattr(merge, "LONG_PIECE", 512)
    try:
        again = iface.load("encode_merge_short")
        assert "#define ENC_LONG_PIECE 512" in again.header and again.digest != shader.digest
    finally:
        kernels.kernel_constants.cache_clear()
