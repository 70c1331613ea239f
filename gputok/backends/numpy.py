"""The numpy backend: the stages of ``gputok.stages`` composed on the host, always available.

Per batch: split at active tokens -> normalise -> pre-tokenize every segment of the batch in one
vectorised pass -> one cache probe per piece, the batch's misses merged together -> emit. It is
the portable path and, stage by stage, the reference the device kernels are tested against.

One text takes ``stages/text.py``, the same stages without the batch bookkeeping.
"""

from __future__ import annotations

from .base import Backend
from ..stages import dedup, emit, split


def available() -> tuple[bool, str]:
    return True, "always available"


def create() -> "NumpyBackend":
    return NumpyBackend()


class NumpyBackend(Backend):
    name = "numpy"

    def plan(self, model) -> dict:
        pre = model.pretokenizer
        if pre.pattern is not None:
            how = "vectorised scanner" if pre.scanner is not None else "regex"
        else:
            how = pre.name
        return {"split": "host", "normalize": "host" if model.normalizer else "none",
                "pretok": f"host ({how})", "merge": f"host ({model.segmenter.name})",
                "emit": "host"}

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset):
        segments, layout = split.split_documents(model, docs.iter_str(), allowed, disallowed)
        first = (split.first_flags(layout, len(segments)) if model.pretokenizer.uses_first
                 else None)
        seg_pieces = model.pieces_batch(segments, first)
        items = split.join_layout(layout, seg_pieces)
        ids, offsets = emit.emit(dedup.ids_of_documents(model, items), model.id_dtype)
        return model.segmenter.finish(ids, offsets)
