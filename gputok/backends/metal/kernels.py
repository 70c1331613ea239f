"""MLX kernels from the shaders of ``shaders/``: each built once per source through
``mx.fast.metal_kernel`` (or an emulator-backed stand-in with its signature, in the tests), its
inputs checked against the interface the shader declares (``iface.py``). Shared by the Metal
encode device (``device.py``) and the Metal trainer (``train.py``).
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from . import iface as metal_iface
from ..kernels import TRAIN_BLOCK

__all__ = ["MAX_GROUPS", "PAD", "Kernel", "KernelFactory", "mx_dtype", "shader_layout"]

MAX_GROUPS = 1024  # threadgroups per grid-stride launch (every shader loops over its range)
PAD = 8  # MLX passes inputs of fewer elements in the constant address space


@functools.lru_cache(maxsize=None)
def shader_layout(header: str) -> tuple[dict, dict]:
    """A trainer's state record fields and stop codes as the shader header ``header`` (in
    ``shaders/``) defines them (``train_arrays.state_layout``; read once, do not mutate)."""
    from ..._resources import source_dir
    from ..train_arrays import state_layout

    return state_layout((source_dir("shaders") / header).read_text("utf-8"))


def mx_dtype(dtype):
    """The MLX dtype of a numpy dtype (``int32`` -> ``mx.int32``)."""
    import mlx.core as mx

    name = np.dtype(dtype).name
    return mx.bool_ if name == "bool" else getattr(mx, name)


class Kernel:
    """One shader as an MLX kernel: inputs checked against the shader's declared interface,
    output dtypes and template arguments taken from it (never repeated by the caller)."""

    def __init__(self, shader: metal_iface.Shader, fn: Callable):
        self.shader = shader
        self.fn = fn
        iface = shader.interface
        self._inputs = [(n, mx_dtype(dt), nd) for n, dt, nd in iface.inputs]
        self._out_dtypes = [mx_dtype(dt) for dt in iface.output_dtypes]
        self._template = [(k, v if isinstance(v, (bool, int)) else mx_dtype(v))
                          for k, v in iface.template]

    def __call__(self, *inputs, output_shapes, grid: int, init_value=None,
                 threadgroup: int = TRAIN_BLOCK) -> list:
        """Run over ``grid`` threads (threadgroups of ``threadgroup``: the trainer's block by
        default, whose shaders' BLOCK template argument is that size); returns the outputs."""
        if len(inputs) != len(self._inputs):
            raise TypeError(f"{self.shader.path.name}: {len(self._inputs)} inputs declared "
                            f"({', '.join(n for n, _, _ in self._inputs)}), {len(inputs)} given")
        for x, (name, dt, ndim) in zip(inputs, self._inputs):
            if x.dtype != dt or x.ndim != ndim or (ndim and x.size < PAD):
                raise TypeError(f"{self.shader.path.name}: input {name!r} is declared {dt} "
                                f"with ndim {ndim} (arrays of >= {PAD} elements), got "
                                f"{x.dtype} of shape {tuple(x.shape)}")
        kw = {} if init_value is None else {"init_value": init_value}
        return self.fn(inputs=list(inputs), output_shapes=[tuple(s) for s in output_shapes],
                       output_dtypes=self._out_dtypes, grid=(int(grid), 1, 1),
                       threadgroup=(int(threadgroup), 1, 1), template=self._template, **kw)


class KernelFactory:
    """Builds each shader's kernel once, keyed by its name and the hash of its source (a new
    source is a new kernel; MLX itself also gets the hash in the kernel's name).

    ``make`` has ``mx.fast.metal_kernel``'s signature; the default is MLX's. The tests pass an
    emulator-backed one (``tests/emulator/mlx_bridge.py``) taking and returning ``mx.array``s,
    so this module runs unchanged on Linux (with a small ``max_groups``: the emulator runs one
    fiber per thread, so fewer threads that loop longer are quicker there).

    >>> k = KernelFactory()("train_find_matches")    # on a Mac
    >>> k.shader.interface.output_names
    ['is_start']
    """

    def __init__(self, make: "Callable | None" = None, *, max_groups: int = MAX_GROUPS):
        self._make = make
        self.max_groups = int(max_groups)  # threadgroups per launch that train_words asks for
        self._built: dict[tuple[str, str], Kernel] = {}
        self._shaders: dict[str, metal_iface.Shader] = {}

    def available(self) -> tuple[bool, str]:
        """Whether these kernels can run here (a custom ``make`` brings its own device)."""
        if self._make is not None:
            return True, ""
        from . import available  # (the metal backend's: macOS, MLX, a Metal device)

        return available()

    def __call__(self, name: str) -> Kernel:
        shader = self._shaders.get(name)
        if shader is None:
            shader = self._shaders[name] = metal_iface.load(name)
        key = (name, shader.digest)
        k = self._built.get(key)
        if k is None:
            make = self._make
            if make is None:
                import mlx.core as mx

                make = mx.fast.metal_kernel
            iface = shader.interface
            fn = make(name=shader.kernel_name, input_names=iface.input_names,
                      output_names=iface.output_names, source=shader.source,
                      header=shader.header, ensure_row_contiguous=iface.ensure_row_contiguous,
                      atomic_outputs=iface.atomic_outputs)
            k = self._built[key] = Kernel(shader, fn)
        return k
