"""The Metal shim is strict: what a Mac rejects, or MLX mishandles, fails here too, before
anything runs, with a message that says which rule. Each rule has its allowed neighbour beside
it, so the test fails both if the shim lets the fault through and if it rejects too much.

Rules (tests/emulator/metal.py, metal_shim.h): 32-bit atomics (64-bit: atomic<ulong> min/max
only), memory_order_relaxed only, no double, at most 31 buffers, at most 32 KiB of threadgroup
memory, an init_value that float32 and the output dtype hold exactly, no lambdas / goto / new /
exceptions, no quoted includes, and small inputs in the constant address space. Then the shader
interface reader (``gputok.backends.metal.iface``) and its errors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emulator import CompileError, MetalError, check_metal_file, compile_metal
from gputok.backends.metal import iface as metal_iface


def launch(k, inputs, out_dtype=np.uint32, n_out=4, init_value=0, **kw):
    (out,) = k(inputs=inputs, output_shapes=[(n_out,)], output_dtypes=[out_dtype],
               grid=(8, 1, 1), threadgroup=(8, 1, 1), init_value=init_value, **kw)
    return out


X8 = np.arange(8, dtype=np.uint32)


def test_64_bit_atomics_are_min_max_only():
    body = ("uint i = thread_position_in_grid.x;\n"
            "atomic_max_explicit(&out[0], (ulong)x[i] << 40, memory_order_relaxed);\n"
            "atomic_min_explicit(&out[1], (ulong)x[i] + 5ul, memory_order_relaxed);\n")
    k = compile_metal("u64_minmax", ["x"], ["out"], body, atomic_outputs=True)
    out = launch(k, [X8], np.uint64, n_out=2, init_value=None, output_fill=0)
    assert out.tolist() == [7 << 40, 0]  # min starts from the 0 the buffer holds
    for op, args in [("atomic_fetch_add_explicit", "1ul"), ("atomic_fetch_max_explicit", "1ul"),
                     ("atomic_exchange_explicit", "1ul")]:
        bad = compile_metal(f"u64_{op}", ["x"], ["out"],
                            f"{op}(&out[0], {args}, memory_order_relaxed);", atomic_outputs=True)
        with pytest.raises(CompileError, match=f"Metal has no 64-bit {op}"):
            bad.build([(np.uint32, 1)], [np.uint64])
    cas = compile_metal("u64_cas", ["x"], ["out"],
                        "ulong e = 0; atomic_compare_exchange_weak_explicit(&out[0], &e, 1ul, "
                        "memory_order_relaxed, memory_order_relaxed);", atomic_outputs=True)
    with pytest.raises(CompileError, match="no 64-bit atomic_compare_exchange_weak_explicit"):
        cas.build([(np.uint32, 1)], [np.uint64])
    ok = compile_metal("u32_cas", ["x"], ["out"],
                       "uint e = 0; atomic_compare_exchange_weak_explicit(&out[0], &e, 9u, "
                       "memory_order_relaxed, memory_order_relaxed);", atomic_outputs=True)
    assert launch(ok, [X8]).tolist() == [9, 0, 0, 0]


def test_no_atomic_type_for_signed_64_bit_or_small_outputs():
    k = compile_metal("i64_atomic", ["x"], ["out"], "out[0];", atomic_outputs=True)
    for dt in (np.int64, np.uint8, np.float16):
        with pytest.raises(MetalError, match=r"Metal has no atomic<"):
            k.build([(np.uint32, 1)], [dt])
    k.build([(np.uint32, 1)], [np.float32])


def test_memory_orders_other_than_relaxed_are_rejected():
    for order in ("memory_order_seq_cst", "memory_order_acquire", "memory_order_acq_rel"):
        k = compile_metal("order", ["x"], ["out"],
                          f"atomic_fetch_add_explicit(&out[0], 1u, {order});",
                          atomic_outputs=True)
        with pytest.raises(CompileError, match="metal_supports_only_memory_order_relaxed"):
            k.build([(np.uint32, 1)], [np.uint32])
    ok = compile_metal("relaxed", ["x"], ["out"],
                       "atomic_fetch_add_explicit(&out[0], 1u, memory_order_relaxed);",
                       atomic_outputs=True)
    assert launch(ok, [X8]).tolist() == [8, 0, 0, 0]


def test_no_double():
    k = compile_metal("dbl", ["x"], ["out"], "double d = x[0]; out[0] = (uint)d;")
    with pytest.raises(CompileError, match="metal_has_no_double_type"):
        k.build([(np.uint32, 1)], [np.uint32])
    with pytest.raises(MetalError, match="Metal has no double"):
        compile_metal("f64", ["x"], ["out"], "out[0] = 1;").build([(np.float64, 1)],
                                                                  [np.uint32])
    ok = compile_metal("flt", ["x"], ["out"], "float d = x[0] + 0.5f; out[0] = (uint)(2 * d);")
    assert launch(ok, [X8 + 3])[0] == 7


def test_at_most_31_buffers():
    names = [f"in{i}" for i in range(29)]
    body = "out[0] = " + " + ".join(f"{n}[0]" for n in names) + " + in0_shape[0];"
    ok = compile_metal("b31", names, ["out"], body)  # 29 + in0_shape + out = 31
    assert launch(ok, [X8 + i for i in range(29)])[0] == sum(range(29)) + 8
    bad = compile_metal("b32", names, ["out", "out2"], body)
    with pytest.raises(MetalError, match="32 buffers .* at most 31"):
        bad.build([(np.uint32, 1)] * 29, [np.uint32] * 2)


def test_at_most_32_kib_of_threadgroup_memory():
    body = ("threadgroup uint a[{n}];\nthreadgroup uchar b[{m}];\n"
            "uint i = thread_position_in_threadgroup.x;\na[i] = i; b[i] = 1;\n"
            "threadgroup_barrier(mem_flags::mem_threadgroup);\nout[i % 4] = a[7 - i] + b[i];")
    ok = compile_metal("tg32k", ["x"], ["out"], body.format(n=8190, m=8))
    assert launch(ok, [X8]).tolist() == [4, 3, 2, 1]
    bad = compile_metal("tg32k1", ["x"], ["out"], body.format(n=8192, m=1))
    with pytest.raises(MetalError, match=r"32769 bytes of threadgroup memory.*32 KiB"):
        bad.build([(np.uint32, 1)], [np.uint32])


@pytest.mark.parametrize("value,dtype,why", [
    (16_777_217, np.uint32, "not exactly a float32"),
    (0xFFFF_FFFF, np.uint32, "not exactly a float32"),
    (-1, np.uint32, "does not fit"),
    (1.5, np.int32, "does not fit"),
    (300, np.uint8, "does not fit"),
])
def test_init_value_must_survive_float32_and_the_dtype(value, dtype, why):
    k = compile_metal("init", ["x"], ["out"], "(void)x;")
    with pytest.raises(MetalError, match=why):
        launch(k, [X8], dtype, init_value=value)


@pytest.mark.parametrize("value,dtype", [(0, np.uint32), (1 << 24, np.uint32),
                                         (-7, np.int64), (2.5, np.float32), (255, np.uint8)])
def test_init_values_that_survive(value, dtype):
    k = compile_metal("init", ["x"], ["out"], "(void)x;")
    assert launch(k, [X8], dtype, init_value=value).tolist() == [value] * 4


@pytest.mark.parametrize("code,what", [
    ("auto f = [&](uint v) { return v + 1; }; out[0] = f(x[0]);", "lambda"),
    ("auto f = [](uint v) { return v; }; out[0] = f(x[0]);", "lambda"),
    ("goto done; done: out[0] = 1;", "goto"),
    ("uint* p = new uint[4]; out[0] = p[0];", "new/delete"),
    ("try { out[0] = 1; } catch (...) {}", "exceptions"),
])
def test_cpp_that_metal_rejects(code, what):
    with pytest.raises(MetalError, match=f"Metal does not support {what}"):
        compile_metal("cpp", ["x"], ["out"], code)


def test_array_indexing_is_not_a_lambda():
    k = compile_metal("idx", ["x"], ["out"],
                      "uint t[2] = {1u, 2u}; out[0] = t[x[1]] + x[x[0]]; // [&] in a comment")
    assert launch(k, [X8])[0] == 2


def test_quoted_includes_are_rejected():
    with pytest.raises(MetalError, match="no include path"):
        compile_metal("inc", ["x"], ["out"], "out[0] = 1;", header='#include "rules.h"\n')
    compile_metal("inc", ["x"], ["out"], "out[0] = 1;", header="#include <metal_stdlib>\n")


def test_small_inputs_are_in_the_constant_address_space():
    """MLX passes an input of fewer than 8 elements as `const constant T*`: a helper taking a
    `device` pointer does not accept it on a Mac, nor here. The backend pads its inputs."""
    header = "METAL_FUNC uint first(const device uint* p) { return p[1]; }\n"
    k = compile_metal("addr", ["x"], ["out"], "out[0] = first(x) + x[0];", header=header)
    assert launch(k, [X8 + 3])[0] == 4 + 3
    with pytest.raises(CompileError, match="first"):
        launch(k, [X8[:7]])
    by_value = compile_metal("addr2", ["x"], ["out"], "out[0] = x[1] + x[0];")
    assert launch(by_value, [X8[:7] + 3])[0] == 7


# ---------------------------------------------------------------- the shader interface reader

@pytest.mark.parametrize("line,message", [
    ("// gpuemu: inputs=x:int32 outputs=y:uint8 color=red", "unknown key 'color'"),
    ("// gpuemu: inputs=x:int33 outputs=y:uint8", "unknown dtype 'int33'"),
    ("// gpuemu: inputs=x:int32,x:int32 outputs=y:uint8", "'x' is declared twice"),
    ("// gpuemu: inputs=x:int32:2 outputs=y:uint8", "only ':0'"),
    ("// gpuemu: inputs=x:int32", "declares no outputs"),
    ("// gpuemu: inputs=x outputs=y:uint8", "name:dtype"),
])
def test_interface_errors_name_the_file_and_line(line, message):
    with pytest.raises(ValueError, match=message) as e:
        metal_iface.parse("// a shader\n" + line, origin="shaders/k.metal")
    assert str(e.value).startswith("shaders/k.metal")


def test_interface_and_includes(tmp_path: Path):
    (tmp_path / "rules.h").write_text("#pragma once\nMETAL_FUNC uint plus1(uint v) "
                                      "{ return v + 1u; }\n")
    (tmp_path / "h.metal").write_text('// gpuemu: header\n#include "rules.h"\n'
                                      '#include "rules.h"\n#include <metal_stdlib>\n')
    body = tmp_path / "k.metal"
    body.write_text("// gpuemu: inputs=x:uint32,n:int64:0 outputs=y:uint32 header=h.metal\n"
                    "// gpuemu: template=T:uint32,K:-2,B:true\n"
                    "uint i = thread_position_in_grid.x;\nif (i < n) y[i] = plus1(x[i]) + K;\n")
    shader = metal_iface.load_file(body, search=())
    iface = shader.interface
    assert iface.inputs == (("x", np.dtype("uint32"), 1), ("n", np.dtype("int64"), 0))
    assert iface.template == (("T", np.dtype("uint32")), ("K", -2), ("B", True))
    assert shader.header.count("METAL_FUNC uint plus1") == 1  # included once
    assert "#pragma once" not in shader.header and "#include <metal_stdlib>" in shader.header
    k = check_metal_file(body)
    (y,) = k(inputs=[X8, np.int64(5)], output_shapes=[(8,)], output_dtypes=[np.uint32],
             grid=(8, 1, 1), threadgroup=(8, 1, 1), template=iface.template, init_value=0)
    assert y.tolist() == [2**32 - 1, 0, 1, 2, 3, 0, 0, 0]  # x + 1 - 2 for i < n
    body.write_text(body.read_text().replace("header=h.metal", "header=gone.metal"))
    with pytest.raises(FileNotFoundError, match="gone.metal"):
        metal_iface.load_file(body, search=())
    (tmp_path / "h.metal").write_text('// gpuemu: header\n\n#include "missing.h"\n')
    body.write_text(body.read_text().replace("header=gone.metal", "header=h.metal"))
    with pytest.raises(FileNotFoundError, match=r"h\.metal:3: #include \"missing.h\" not found"):
        metal_iface.load_file(body, search=())
    body.write_text('// gpuemu: inputs=x:uint32 outputs=y:uint32\n#include "rules.h"\n')
    with pytest.raises(ValueError, match="a kernel body cannot #include"):
        metal_iface.load_file(body, search=())


def test_every_shader_is_listed_and_loads():
    from gputok.backends import metal as metal_encode
    from gputok.backends.metal import train as metal

    assert metal_iface.shader_names() == sorted(metal.SHADERS + metal_encode.SHADERS)
    for name in metal.SHADERS + metal_encode.SHADERS:
        shader = metal_iface.load(name)
        assert "THE COMPARATOR" in shader.header  # the shared rules came in through the header
        assert shader.kernel_name == f"{name}_{shader.digest[:12]}"
    with pytest.raises(KeyError, match="no shader named 'nope'.*train_apply_merge"):
        metal_iface.load("nope")


def test_shaders_load_from_the_wheel_layout(tmp_path: Path):
    """In the wheel, kernels/ and shaders/ become gputok/_kernels and gputok/_shaders: the
    headers' includes resolve by search path, not by the checkout's relative layout."""
    import shutil

    root = Path(__file__).resolve().parent.parent
    shutil.copytree(root / "kernels", tmp_path / "_kernels")
    shutil.copytree(root / "shaders", tmp_path / "_shaders")
    for name in ("train_merge_deltas", "train_fold_best"):
        packaged = metal_iface.load_file(tmp_path / "_shaders" / f"{name}.metal",
                                         search=(tmp_path / "_kernels",))
        here = metal_iface.load(name)
        assert (packaged.source, packaged.header, packaged.digest) == \
            (here.source, here.header, here.digest)
