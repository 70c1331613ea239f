"""What every backend is: a name, the two ways it encodes (a batch, one text), and its fallback
accounting (a stage that runs on the host instead of the device is counted and warned about
once). ``backends/__init__.py`` finds backends by name; ``numpy.py`` and ``driver.py`` are the
two kinds.
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter

import numpy as np

from .protocol import HostTools

ONE_TEXT_BATCH_MIN = 1 << 16  # characters: a longer single text takes the batch pipeline


class FallbackWarning(RuntimeWarning):
    """Part of a batch ran on the host instead of the backend's device (a stage the device does
    not implement for this model, out of device memory, an oversized document)."""


class Backend:
    """Base of every backend: a name, and fallback accounting."""

    name = "?"

    #: native helpers this backend gives the host stages (``protocol.HostTools``)
    tools = HostTools()

    def __init__(self):
        self.fallbacks: Counter = Counter()  # (stage, reason) -> times
        self._warned: set = set()
        self._warn_lock = threading.Lock()

    def encode(self, model, docs, allowed: frozenset, disallowed: frozenset
               ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def plan(self, model) -> dict:
        """Where each stage runs for ``model``: {stage: description}."""
        raise NotImplementedError

    def encode_text(self, model, text: str, allowed: frozenset) -> list:
        """One text's ids as a Python list (``Encoding.encode``; ``text`` already checked for
        disallowed tokens): on the host up to ``ONE_TEXT_BATCH_MIN`` characters (a regex call
        and a few cache probes), longer ones through the batch pipeline (``encode_list``: its
        many distinct pieces merge together, e.g. 5x faster than one by one on base64 blobs).
        A device backend has its own ways (``runners/onetext.py``)."""
        if len(text) < ONE_TEXT_BATCH_MIN:
            from ..stages.text import encode_text

            return encode_text(model, text, allowed)
        return self.encode_list(model, text, allowed)

    def text_call(self, model):
        """A function of one text giving ``encode_text(model, text, frozenset())``, bound once
        for ``model`` (``Encoding`` keeps it: a short text then costs no dispatch), or None:
        this backend has none for ``model`` (``encode_text`` serves)."""
        return None

    def encode_list(self, model, text: str, allowed: frozenset) -> list:
        """One text's ids as a Python list, through the batch pipeline."""
        from ..stages.pack import Documents

        ids, _ = self.encode(model, Documents([text]), allowed, frozenset())
        return self.id_list(ids)

    def id_list(self, ids) -> list:
        """``ids.tolist()`` (with this backend's list builder, ``tools.lister``)."""
        from ..stages.lists import id_list

        return id_list(ids, self.tools.lister)

    def holding(self):
        """A context in which the backend keeps its device memory from one batch to the next
        (a corpus job's run of batches); outside it a GPU backend gives its pools back after
        each batch, so a model in the same process gets the memory. Nothing by default."""
        import contextlib

        return contextlib.nullcontext()

    def prepare_ahead(self, model) -> None:
        """Start getting ``model`` ready (its tables on the device) in the background, for a
        caller that knows a batch is coming; nothing by default. Optional: the first batch
        prepares what is not ready."""

    def describe(self, model) -> str:
        return f"{model.name} on {self.name}: " + "; ".join(f"{k} {v}" for k, v in
                                                             self.plan(model).items())

    def fallback(self, stage: str, reason: str, message: str, *, once_key=None) -> None:
        """Count a fallback, and warn about it once per ``once_key`` (default: stage+reason)."""
        self.fallbacks[(stage, reason)] += 1
        key = once_key if once_key is not None else (stage, reason)
        with self._warn_lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(f"gputok {self.name}: {message}", FallbackWarning, stacklevel=4)
