"""MLX Metal kernels (``mx.fast.metal_kernel``) on the emulator, wrapped exactly as MLX wraps them.

``MetalKernel.metal_source`` writes the Metal source MLX 0.32 generates for a call, character for
character (``tests/test_metal_fidelity.py`` compares it with what MLX itself prints on export); the
emulator compiles *that* text against ``metal_shim.h``, so the signature a body runs under here is
the one it gets on a Mac. A small input (under 8 elements) is a ``const constant T*`` there and a
``const volatile T*`` here: passing it to a helper that takes a ``device`` pointer fails on both.

Strict where a Mac is (``MetalError``, before anything runs): more than 31 buffers, more than
32 KiB of threadgroup memory, float64 anywhere, atomic outputs of a type Metal has no atomic for,
an ``init_value`` that float32 or the output dtype cannot hold, ``#include "..."`` (MLX compiles
the text with no include path), and C++ that Metal does not accept (lambdas, goto, exceptions,
virtual, new/delete, thread_local, dynamic_cast, typeid). The shim rejects 64-bit atomics other
than min/max, memory orders other than relaxed, and ``double``, at compile time.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .metal_text import (CONSTANT_BELOW, MAX_BUFFERS, MetalError, _strip_metal_includes,
                         check_init_value, check_metal_text, check_threadgroup_bytes,
                         detemplate, detemplate_parts, rewrite_threadgroup)
from .runner import (DEFAULT_SPIN_LIMIT, DEFAULT_STACK, METAL_SHIM, POISON, KernelError, _build,
                     _dims, _options)

# MLX's attribute table (name, type); an attribute becomes a parameter when the body mentions
# it, in this (alphabetical) order.
MLX_ATTRIBUTES = (
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
)

# MLX's type names; float64 has none (Metal has no double), bfloat16 is not emulated
_MLX_TYPES = {"bool": "bool", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
              "uint64": "uint64_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
              "int64": "int64_t", "float16": "float16_t", "float32": "float"}
# types Metal has atomics for (64-bit: min/max only, enforced by the shim)
_ATOMIC_TYPES = ("int32", "uint32", "float32", "uint64")

def mlx_type(dtype: Any) -> str:
    """MLX's type string for a numpy dtype (``float32`` -> ``float``)."""
    dt = np.dtype(dtype)
    try:
        return _MLX_TYPES[dt.name]
    except KeyError:
        why = "Metal has no double" if dt.name == "float64" else "not emulated"
        raise MetalError(f"dtype {dt} has no Metal equivalent here ({why})") from None


def _template_items(template: Any) -> list[tuple[str, Any]]:
    if not template:
        return []
    items = list(template.items()) if isinstance(template, Mapping) else list(template)
    return [(str(k), v) for k, v in items]


def _template_param(v: Any) -> tuple[str, str]:
    """(kind in the template header, value in the instantiation), as MLX writes them."""
    if isinstance(v, (bool, np.bool_)):
        return "bool", "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return "int", str(int(v))
    return "typename", mlx_type(v)


def _input_desc(d: Sequence[Any]) -> tuple[np.dtype, int, int]:
    """(dtype, ndim, size) from (dtype, ndim) or (dtype, ndim, size); size defaults to a
    device-memory input."""
    dt, ndim = np.dtype(d[0]), int(d[1])
    size = int(d[2]) if len(d) > 2 else (1 if ndim == 0 else CONSTANT_BELOW)
    return dt, ndim, size


class MetalKernel:
    """An ``mx.fast.metal_kernel`` equivalent that runs on the emulator."""

    def __init__(self, name: str, input_names: Sequence[str], output_names: Sequence[str],
                 source: str, header: str = "", ensure_row_contiguous: bool = True,
                 atomic_outputs: bool = False, *, source_label: str | None = None):
        if not output_names:
            raise ValueError("[metal_kernel] Must specify at least one output.")
        self.name = name
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.source = source
        self.header = header
        self.ensure_row_contiguous = ensure_row_contiguous
        self.atomic_outputs = atomic_outputs
        self.source_label = source_label or f"{name}:source"
        self.shape_infos = [(f"{n}_shape" in source, f"{n}_strides" in source,
                             f"{n}_ndim" in source) for n in self.input_names]
        self.attributes = [(a, t) for a, t in MLX_ATTRIBUTES if a in source]
        self._last_lib: ctypes.CDLL | None = None
        self._built: dict = {}  # (inputs, output dtypes, template) -> its library
        check_metal_text(header, f"{name}:header")
        check_metal_text(source, self.source_label)

    # -- code generation
    def metal_source(self, inputs: Sequence[Sequence[Any]], output_dtypes: Sequence[Any],
                     template: Any = None) -> tuple[str, str]:
        """(function name, Metal source) exactly as MLX generates them for inputs given as
        (dtype, ndim, size) (or (dtype, ndim): an input in device memory)."""
        fname, parts = self._parts(inputs, output_dtypes, template)
        return fname, "".join(parts)

    def _parts(self, inputs, output_dtypes, template) -> tuple[str, list[str]]:
        """MLX's source in four pieces: header, signature, body, the rest."""
        if len(inputs) != len(self.input_names):
            raise ValueError(f"[metal_kernel] Expected `inputs` to have size "
                             f"{len(self.input_names)} but got size {len(inputs)}.")
        if len(output_dtypes) != len(self.output_names):
            raise ValueError(f"[metal_kernel] Expected `output_dtypes` to have size "
                             f"{len(self.output_names)} but got size {len(output_dtypes)}.")
        targs = [(k, *_template_param(v)) for k, v in _template_items(template)]
        fname = f"custom_kernel_{self.name}"
        if targs:
            fname += "_" + "".join("_" + v.replace("-", "_") for _, _, v in targs)
        params: list[str] = []
        for d, name, (sh, st, nd) in zip(inputs, self.input_names, self.shape_infos):
            dt, ndim, size = _input_desc(d)
            ty = mlx_type(dt)
            if ndim == 0:
                fname += f"_{ty}s"
                params.append(f"const constant {ty}& {name}")
                continue
            space = "constant" if size < CONSTANT_BELOW else "device"
            fname += f"_{ty}c" if space == "constant" else f"_{ty}"
            params.append(f"const {space} {ty}* {name}")
            if sh:
                params.append(f"const constant int* {name}_shape")
            if st:
                params.append(f"const constant int64_t* {name}_strides")
            if nd:
                params.append(f"const constant int& {name}_ndim")
        for dtype, name in zip(output_dtypes, self.output_names):
            ty = mlx_type(dtype)
            fname += f"_{ty}"
            if self.atomic_outputs:
                if np.dtype(dtype).name not in _ATOMIC_TYPES:
                    raise MetalError(f"{self.name}: output {name!r} is atomic (atomic_outputs="
                                     f"True) but Metal has no atomic<{ty}>")
                ty = f"atomic<{ty}>"
            params.append(f"device {ty}* {name}")
        if len(params) > MAX_BUFFERS:
            raise MetalError(f"{self.name}: {len(params)} buffers (inputs, their shape/stride "
                             f"buffers and outputs); Metal allows at most {MAX_BUFFERS}")
        params = [f"{p} [[buffer({i})]]" for i, p in enumerate(params)]
        params += [f"{ty} {a} [[{a}]]" for a, ty in self.attributes]
        sig = ""
        if targs:
            sig += "template <" + ", ".join(f"{kind} {k}" for k, kind, _ in targs) + ">\n"
        sig += f"[[kernel]] void {fname}(\n" + ",\n".join("  " + p for p in params) + ") {\n"
        tail = "\n}\n"
        if targs:
            inst = f"{fname}<{', '.join(v for _, _, v in targs)}>"
            tail += (f'\ntemplate [[host_name("{fname}")]] [[kernel]] decltype({inst}) '
                     f"{inst};\n")
        return fname, [self.header, sig, self.source, tail + "\n"]

    def generate(self, inputs: Sequence[Sequence[Any]], output_dtypes: Sequence[Any],
                 template: Any = None) -> str:
        """The C++ translation unit: MLX's Metal source (``metal_source``) for the shim, with its
        template arguments bound (``detemplate``), plus a launcher that passes the buffers and
        the thread attributes."""
        fname, parts = self._parts(inputs, output_dtypes, template)
        header, sig, body, tail = detemplate_parts(parts)
        call, slot = [], 0
        for d, (sh, st, nd) in zip(inputs, self.shape_infos):
            dt, ndim, _ = _input_desc(d)
            ty = mlx_type(dt)
            if ndim == 0:
                call.append(f"*static_cast<const {ty}*>(a[{slot}])")
                slot += 1
                continue
            call.append(f"static_cast<const {ty}*>(a[{slot}])")
            slot += 1
            for flag, cty, deref in ((sh, "int", ""), (st, "int64_t", ""), (nd, "int", "*")):
                if flag:
                    call.append(f"{deref}static_cast<const {cty}*>(a[{slot}])")
                    slot += 1
        for dtype in output_dtypes:
            ty = mlx_type(dtype)
            ty = f"atomic<{ty}>" if self.atomic_outputs else ty
            call.append(f"static_cast<{ty}*>(a[{slot}])")
            slot += 1
        call += [f"A.{attr}" for attr, _ in self.attributes]
        def metal(text: str) -> str:
            return rewrite_threadgroup(_strip_metal_includes(text))

        # MLX's text, with #line marks so that compiler messages name the header or body file
        lines = [f'#line 1 "{self.name}:header"', metal(header) + '\n#line 1 "<mlx wrapper>"',
                 sig + f'#line 1 "{self.source_label}"', metal(body),
                 '#line 1 "<mlx wrapper end>"', tail,
                 '#line 1 "<gpuemu launcher>"', "namespace {",
                 "void gpuemu_call(void* p) {",
                 "  void** a = static_cast<void**>(p);",
                 "  const ::gpuemu::MetalAttrs A = ::gpuemu::metal_attrs();",
                 "  (void)a; (void)A;",
                 f"  {fname}(" + ", ".join(call) + ");",
                 "}", "}  // namespace",
                 "GPUEMU_EXPORT int gpuemu_metal_launch(void** a, const unsigned* g, "
                 "const unsigned* t, const long long* o) "
                 "{ return ::gpuemu::metal_launch(g, t, o, &gpuemu_call, a); }"]
        return "\n".join(lines) + "\n"

    def build(self, inputs: Sequence[Sequence[Any]], output_dtypes: Sequence[Any],
              template: Any = None) -> ctypes.CDLL:
        """Compile the variant for these inputs, output dtypes and template arguments (cached);
        this is also the syntax check of a body. Checks the threadgroup memory it declares."""
        key = repr(([tuple(x) for x in inputs], list(output_dtypes), template))
        got = self._built.get(key)
        if got is not None:  # (a trainer launches the same variants thousands of times:
            return got       # generating their text again was most of an emulated step)
        lib = _build(self.generate(inputs, output_dtypes, template), METAL_SHIM, [], [],
                     f"metal kernel {self.name!r}")
        check_threadgroup_bytes(lib, self.name)
        self._built[key] = lib
        return lib

    # -- running
    def __call__(self, *, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]],
                 output_dtypes: Sequence[Any], grid: Sequence[int], threadgroup: Sequence[int],
                 template: Any = None, init_value: float | None = None, verbose: bool = False,
                 order: str = "forward", seed: int = 0, yield_on_atomic: bool = False,
                 allow_exited_at_barrier: bool = False, stack_size: int = DEFAULT_STACK,
                 shared_fill: int | None = POISON, output_fill: int | None = POISON,
                 spin_limit: int = DEFAULT_SPIN_LIMIT,
                 max_threads_per_threadgroup: int = 1024) -> list[np.ndarray]:
        """Run like ``mx.fast.metal_kernel(...)(...)``; returns the outputs as numpy arrays.

        grid is the number of threads (``dispatchThreads``); the threadgroup is clipped to it per
        dimension, and edge threadgroups may be partial. Outputs start as ``init_value`` when
        given, else every byte is ``output_fill`` (MLX leaves them uninitialised).
        """
        if len(output_shapes) != len(self.output_names):
            raise ValueError(f"[metal_kernel] Expected `output_shapes` to have size "
                             f"{len(self.output_names)} but got size {len(output_shapes)}.")
        if init_value is not None:
            check_init_value(init_value, output_dtypes, self.name)
        arrays = []
        for x in inputs:
            x = np.asarray(x)
            if (self.ensure_row_contiguous or x.ndim == 0) and not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)  # (a 0-d array is always contiguous: stays 0-d)
            arrays.append(x)
        descs = [(x.dtype, x.ndim, x.size) for x in arrays]
        if verbose:
            print(f"Generated source code for `{self.name}`:\n```\n"
                  f"{self.metal_source(descs, output_dtypes, template)[1]}```")
        lib = self.build(descs, output_dtypes, template)
        outputs = []
        for shape, dtype in zip(output_shapes, output_dtypes):
            dt = np.dtype(dtype)
            if init_value is not None:
                o = np.full(tuple(shape), init_value, dtype=dt)
            else:
                o = np.empty(tuple(shape), dtype=dt)
                if output_fill is not None and o.size:
                    o.reshape(-1).view(np.uint8).fill(output_fill)
            outputs.append(o)
        holders, keep = [], [arrays, outputs]
        for x, (sh, st, nd) in zip(arrays, self.shape_infos):
            holders.append(ctypes.c_void_p(x.ctypes.data))
            if x.ndim == 0:
                continue
            if sh:
                shape = np.asarray(x.shape, dtype=np.int32)
                keep.append(shape)
                holders.append(ctypes.c_void_p(shape.ctypes.data))
            if st:
                if any(s % x.itemsize for s in x.strides):
                    raise ValueError("input strides are not multiples of the element size")
                strides = np.asarray([s // x.itemsize for s in x.strides], dtype=np.int64)
                keep.append(strides)
                holders.append(ctypes.c_void_p(strides.ctypes.data))
            if nd:
                ndim = ctypes.c_int(x.ndim)
                keep.append(ndim)
                holders.append(ctypes.c_void_p(ctypes.addressof(ndim)))
        for o in outputs:
            holders.append(ctypes.c_void_p(o.ctypes.data))
        argv = (ctypes.c_void_p * max(1, len(holders)))(*[h.value for h in holders])
        g = (ctypes.c_uint * 3)(*_dims(grid, "grid"))
        t = (ctypes.c_uint * 3)(*_dims(threadgroup, "threadgroup"))
        opts = _options(order, seed, 0, yield_on_atomic, allow_exited_at_barrier, stack_size,
                        shared_fill, spin_limit, max_threads_per_threadgroup)
        lib.gpuemu_metal_launch.restype = ctypes.c_int
        rc = lib.gpuemu_metal_launch(argv, g, t, opts)
        self._last_lib = lib
        del keep
        if rc != 0:
            raise KernelError(f"{self.name}: {lib.gpuemu_last_error().decode(errors='replace')}")
        return outputs

    def launch(self, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]],
               output_dtypes: Sequence[Any], grid: Sequence[int], threadgroup: Sequence[int],
               **kw: Any) -> list[np.ndarray]:
        """Positional form of ``__call__``."""
        return self(inputs=inputs, output_shapes=output_shapes, output_dtypes=output_dtypes,
                    grid=grid, threadgroup=threadgroup, **kw)

    def barriers_released(self) -> int:
        """Barriers released during the last launch (a test aid)."""
        return int(self._last_lib.gpuemu_barriers_released()) if self._last_lib else 0


def syntax_check(text: str, label: str) -> None:
    """Compile a complete Metal source as MLX generated it (``metal_source``, or MLX's own
    printout) against the shim: what the emulator runs, less the launcher. Raises CompileError
    or MetalError."""
    check_metal_text(text, label)
    code = rewrite_threadgroup(_strip_metal_includes(text))
    _build(f'#line 1 "{label}"\n' + code, METAL_SHIM, [], [], label)  # as written: a template
    lib = _build(f'#line 1 "{label}"\n' + detemplate(code), METAL_SHIM, [], [], label)
    check_threadgroup_bytes(lib, label)


def compile_metal(name: str, input_names: Sequence[str], output_names: Sequence[str],
                  source: str, header: str = "", ensure_row_contiguous: bool = True,
                  atomic_outputs: bool = False) -> MetalKernel:
    """Same arguments as ``mx.fast.metal_kernel``. Building happens per (input dtypes/ndims/
    sizes, output dtypes, template) variant at the first launch (or explicitly with ``.build``)."""
    return MetalKernel(name, input_names, output_names, source, header, ensure_row_contiguous,
                       atomic_outputs)


# ------------------------------------------------------------------------------ .metal files

def metal_interface(text: str):
    """The interface comment of a ``.metal`` file (``gputok.backends.metal.iface.parse``), or None."""
    from gputok.backends.metal.iface import parse

    return parse(text)


def kernel_for(shader) -> MetalKernel:
    """The emulator kernel of a ``gputok.backends.metal.iface.Shader``, built as the backend builds it."""
    iface = shader.interface
    return MetalKernel(shader.kernel_name, iface.input_names, iface.output_names, shader.source,
                       shader.header, iface.ensure_row_contiguous, iface.atomic_outputs,
                       source_label=shader.path.name)


def check_metal_file(path: str | Path) -> MetalKernel | None:
    """Compile a ``.metal`` body file through the MLX wrapper (a syntax check), with its header
    resolved by ``gputok.backends.metal.iface``. Returns the kernel, or None for a file without an
    interface comment. A header file is compiled on its own."""
    from gputok.backends.metal.iface import load_file

    path = Path(path)
    if metal_interface(path.read_text()) is None:
        return None
    shader = load_file(path)
    iface = shader.interface
    if iface.is_header:
        k = MetalKernel(f"{path.stem}_header_check", [], ["unused"], "", shader.header,
                        source_label=path.name)
        k.build([], [np.uint32])
        return k
    k = kernel_for(shader)
    k.build([(dt, nd) for _, dt, nd in iface.inputs], iface.output_dtypes, iface.template)
    return k
