"""The emulator wraps Metal bodies exactly as MLX does: checked against MLX itself, on Linux.

``mx.fast.metal_kernel`` cannot run without a Metal device, but tracing a call for
``mx.export_function`` with ``verbose=True`` prints the complete Metal source MLX would compile.
For every shader (training and encode), built by the backend's own ``KernelFactory`` around MLX's real
``metal_kernel`` and called with the dtypes, ranks and sizes the driver uses, that source must
equal, character for character, the one the emulator generates and runs
(``MetalKernel.metal_source``): same function name, buffers, address spaces, attributes, template
instantiation, header and body. And MLX's text must compile against the Metal shim.

A second set of probe kernels covers the wrapping rules the shaders do not use (small inputs in
the constant address space, shape/stride/ndim buffers, negative and boolean template arguments).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from emulator import compile_metal, kernel_for, syntax_check
from gputok.backends.metal import iface as metal_iface

mx = pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]'")
from gputok.backends.metal import train as metal  # noqa: E402

_BLOCK = re.compile(r"Generated source code for `([^`]+)`:\n```\n(.*?)```\n", re.S)


def mlx_sources(capfd, tmp_path, fn, *args) -> dict[str, str]:
    """Trace ``fn(*args)`` for export and collect the Metal source MLX prints per kernel."""
    capfd.readouterr()
    mx.export_function(str(tmp_path / "traced.mlxfn"), fn, *args)
    out = capfd.readouterr().out
    found = dict(_BLOCK.findall(out))
    assert found, f"MLX printed no generated source (MLX {mx.__version__}):\n{out[:2000]}"
    return found


def _verbose_maker(**kw):
    """MLX's real metal_kernel, every call made with verbose=True."""
    k = mx.fast.metal_kernel(**kw)

    def call(**c):
        return k(**c, verbose=True)
    return call


def _example(dt: np.dtype, ndim: int, size: int):
    return mx.zeros((size,), dtype=metal.mx_dtype(dt)) if ndim else \
        mx.array(1, dtype=metal.mx_dtype(dt))


@pytest.mark.parametrize("name", metal_iface.shader_names())
def test_shader_source_equals_mlx(name, capfd, tmp_path):
    shader = metal_iface.load(name)
    iface = shader.interface
    kernel = metal.KernelFactory(make=_verbose_maker)(name)
    size = 1024  # every array the driver passes has >= 8 elements (device memory)
    args = [_example(dt, nd, size) for _, dt, nd in iface.inputs]

    def fn(*xs):
        return kernel(*xs, output_shapes=[(size,)] * len(iface.outputs), grid=4 * metal.TRAIN_BLOCK,
                      init_value=0 if iface.atomic_outputs else None)

    found = mlx_sources(capfd, tmp_path, fn, *args)
    assert list(found) == [shader.kernel_name]
    got = found[shader.kernel_name]
    fname, ours = kernel_for(shader).metal_source(
        [(dt, nd, size if nd else 1) for _, dt, nd in iface.inputs], iface.output_dtypes,
        iface.template)
    assert got == ours
    assert f"[[kernel]] void {fname}(" in got and shader.source in got and shader.header in got
    syntax_check(got, f"{name} as MLX generates it")


PROBE_HEADER = "// probe header\nMETAL_FUNC uint twice(uint x) { return 2u * x; }\n"
PROBE_BODY = """
    threadgroup uint scratch[16];
    uint i = thread_position_in_grid.x + threads_per_threadgroup.x + grid_size.x
           + simdgroup_index_in_threadgroup + thread_index_in_simdgroup;
    scratch[i % 16] = small[0] + (uint)n + (uint)x_shape[0] + (uint)x_strides[0] + (uint)x_ndim;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i % 8] = twice(x[0]) + scratch[0] + (uint)flag_ndim;
"""
PROBES = {
    # (inputs as (numpy dtype, shape), template, atomic outputs, output dtypes)
    "typename_negative_bool": ([(np.uint32, (3, 4)), (np.int64, ()), (np.int32, (3,)),
                                (np.uint8, (9,))],
                               [("T", np.float32), ("K", -3), ("Q", False), ("R", True)],
                               False, [np.uint32]),
    "no_template_small_inputs": ([(np.uint32, (7,)), (np.float32, ()), (np.int32, (1,)),
                                  (np.float16, (2, 2))], None, False, [np.uint32]),
    "atomic_outputs": ([(np.uint32, (8,)), (np.uint32, ()), (np.int32, (8,)), (np.bool_, (8,))],
                       [("N", 4)], True, [np.uint32]),
}


@pytest.mark.parametrize("probe", list(PROBES))
def test_wrapping_rules_equal_mlx(probe, capfd, tmp_path):
    inputs, template, atomic, out_dtypes = PROBES[probe]
    names = ["x", "n", "small", "flag"]
    body = PROBE_BODY if not atomic else PROBE_BODY.replace(
        "out[i % 8] = ", "atomic_fetch_add_explicit(&out[i % 8], ").replace(
        "(uint)flag_ndim;", "(uint)flag_ndim, memory_order_relaxed);")
    k = mx.fast.metal_kernel(name=f"probe_{probe}", input_names=names, output_names=["out"],
                             source=body, header=PROBE_HEADER, ensure_row_contiguous=False,
                             atomic_outputs=atomic)
    mx_template = [(t, v if isinstance(v, (bool, int)) else metal.mx_dtype(v))
                   for t, v in template] if template else None

    def fn(*xs):
        return k(inputs=list(xs), output_shapes=[(8,)], grid=(64, 1, 1),
                 output_dtypes=[metal.mx_dtype(d) for d in out_dtypes], threadgroup=(32, 1, 1),
                 template=mx_template, init_value=0, verbose=True)

    args = [mx.zeros(shape, dtype=metal.mx_dtype(dt)) for dt, shape in inputs]
    (got,) = mlx_sources(capfd, tmp_path, fn, *args).values()
    ours = compile_metal(f"probe_{probe}", names, ["out"], body, header=PROBE_HEADER,
                         ensure_row_contiguous=False, atomic_outputs=atomic)
    _, want = ours.metal_source([(dt, len(shape), int(np.prod(shape))) for dt, shape in inputs],
                                out_dtypes, template)
    assert got == want
    syntax_check(got, f"probe {probe} as MLX generates it")
