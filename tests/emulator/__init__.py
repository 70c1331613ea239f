"""CPU emulator for the project's CUDA (``kernels/*.cu``) and Metal (``shaders/*.metal``) kernels.

Kernel sources are compiled with g++ against small shims (``cuda_shim.h``, ``metal_shim.h``) and
run with one fiber per GPU thread, so barriers, warp collectives and atomics behave as on a GPU
and CI without a GPU can check every kernel against the numpy reference. See README.md.
"""

from .metal import (
    MLX_ATTRIBUTES,
    MetalError,
    MetalKernel,
    check_metal_file,
    compile_metal,
    kernel_for,
    metal_interface,
    syntax_check,
)
from .runner import (
    ORDERS,
    CompileError,
    EmulatorError,
    Kernel,
    KernelError,
    Module,
    cache_dir,
    compile_cuda,
    find_kernels,
)

__all__ = [
    "MLX_ATTRIBUTES", "ORDERS", "CompileError", "EmulatorError", "Kernel", "KernelError",
    "MetalError", "MetalKernel", "Module", "cache_dir", "check_metal_file", "compile_cuda",
    "compile_metal", "find_kernels", "kernel_for", "metal_interface", "syntax_check",
]
