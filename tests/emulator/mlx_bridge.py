"""``mx.fast.metal_kernel`` on the emulator, over ``mlx[cpu]`` arrays.

``metal_kernel_maker(order=...)`` returns a function with ``mx.fast.metal_kernel``'s signature
whose kernels take and return ``mx.array``s, like MLX's, but run the body on the CPU emulator
(``metal.MetalKernel``: MLX's exact Metal wrapping, the strict shim). Handed to
``gputok.backends.metal.kernels.KernelFactory(make=...)``, it lets the Metal backend's own code run on Linux
unchanged: only the kernel launches differ from a Mac.

Inputs are read with ``np.array(x, copy=False)`` (what the backend does with unified memory on a
Mac); outputs come back as new ``mx.array``s, fresh on every call as MLX's are.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .metal import MetalKernel


def numpy_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype of an MLX dtype (``mx.int32`` -> ``int32``); numpy dtypes pass through."""
    import mlx.core as mx

    if isinstance(dtype, mx.Dtype):
        name = str(dtype).rsplit(".", 1)[-1]
        return np.dtype("bool" if name == "bool_" else name)
    return np.dtype(dtype)


def metal_kernel_maker(*, order: str = "forward", seed: int = 0, yield_on_atomic: bool = False,
                       calls: "list[str] | None" = None) -> Callable:
    """A stand-in for ``mx.fast.metal_kernel``; every launch runs in ``order`` (and appends the
    kernel's name to ``calls`` when given)."""
    import mlx.core as mx

    def metal_kernel(name: str, input_names: Sequence[str], output_names: Sequence[str],
                     source: str, header: str = "", ensure_row_contiguous: bool = True,
                     atomic_outputs: bool = False, compile_options: Any = None) -> Callable:
        k = MetalKernel(name, input_names, output_names, source, header, ensure_row_contiguous,
                        atomic_outputs)

        def call(*, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]],
                 output_dtypes: Sequence[Any], grid: Sequence[int], threadgroup: Sequence[int],
                 template: Any = None, init_value: "float | None" = None,
                 verbose: bool = False, stream: Any = None) -> list:
            for i, x in enumerate(inputs):
                if not isinstance(x, mx.array):
                    raise TypeError(f"[metal_kernel] {name}: input {i} is a "
                                    f"{type(x).__name__}, not an mx.array")
            arrays = [np.array(x, copy=False) for x in inputs]
            items = list(template.items()) if isinstance(template, dict) else list(template or [])
            tmpl = [(key, numpy_dtype(v) if isinstance(v, mx.Dtype) else v) for key, v in items]
            outs = k(inputs=arrays, output_shapes=output_shapes,
                     output_dtypes=[numpy_dtype(d) for d in output_dtypes], grid=grid,
                     threadgroup=threadgroup, template=tmpl, init_value=init_value,
                     verbose=verbose, order=order, seed=seed, yield_on_atomic=yield_on_atomic)
            if calls is not None:
                calls.append(name)
            return [mx.array(o) for o in outs]

        call.kernel = k  # the emulator kernel behind it (a test aid)
        return call

    return metal_kernel
