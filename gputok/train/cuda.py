"""The CUDA training backend: ``device.train_on_device`` with the kernels of
``kernels/train_bpe.cu`` compiled by CuPy (NVRTC). CuPy is imported only when this backend is
asked for; without CuPy or a GPU, ``available()`` says why and ``train_bpe(backend="cuda")``
raises ``RuntimeError`` with that reason.

Word counting stays on the CPU (the pre-tokenizer stage); the words' symbols, their counts and
the pair table then move to the GPU once, and every merge step runs there. If the GPU runs out
of memory, training restarts on the CPU backend with a warning.
"""

from __future__ import annotations

import warnings
from collections import Counter

from .vocab import Vocab

def available() -> tuple[bool, str]:
    """Same requirement as the encode backend: CuPy and a visible CUDA device."""
    from ..backends.cuda import available as cuda_available

    return cuda_available()


def kernel_source() -> tuple[str, str]:
    """(source text, headers expanded; include directory) of the training kernels."""
    from ..backends import kernels

    return kernels.source(kernels.TRAIN_FILE), str(kernels.kernel_dir())


def _launcher():
    """A launch function over the training module on the current GPU (one module per device,
    source digest and defines: the loader the encode kernels use)."""
    import cupy

    from ..backends import kernels
    from .device import BLOCK

    mod = kernels.cupy_module(cupy.cuda.Device().id, kernels.TRAIN_FILE,
                              (("TRAIN_BLOCK", BLOCK),))
    functions: dict = {}

    def launch(name, grid, block, args):
        fn = functions.get(name)
        if fn is None:
            fn = functions[name] = mod.get_function(name)
        fn(tuple(grid), tuple(block), tuple(args))

    return launch


def train_words(words: Counter, vocab: Vocab, *, vocab_size: int, min_frequency: int,
                on_merge=None) -> list[tuple[int, int, int]]:
    """The merge loop on the GPU (same contract as ``cpu.train_words``)."""
    ok, why = available()
    if not ok:
        raise RuntimeError(f"the cuda training backend is not available: {why}")
    import cupy

    from . import cpu
    from .device import train_on_device

    ids, offsets, counts = cpu.word_arrays(words, vocab)
    snapshot = vocab.copy()
    try:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        max_blocks = 8 * int(props["multiProcessorCount"])
        merges = train_on_device(ids, offsets, counts, vocab, vocab_size=vocab_size,
                                 min_frequency=min_frequency, xp=cupy, launch=_launcher(),
                                 max_blocks=max_blocks, on_merge=on_merge)
        cupy.cuda.Device().synchronize()
        return merges
    except cupy.cuda.memory.OutOfMemoryError as e:
        warnings.warn(f"gputok train: the GPU ran out of memory ({e}); training on the CPU "
                      "instead", RuntimeWarning, stacklevel=2)
        vocab.restore(snapshot)
        return cpu.train_words(words, vocab, vocab_size=vocab_size,
                               min_frequency=min_frequency, on_merge=on_merge)
