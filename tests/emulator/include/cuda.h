// Stand-in for <cuda.h> when a kernel is built by the CPU emulator: everything it needs
// comes from cuda_shim.h, which the build force-includes.
#pragma once
