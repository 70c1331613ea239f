"""The devices gputok runs on: one registration each.

Everything that names devices reads ``DEVICES``: ``get_backend`` and ``"auto"``'s order,
``availability`` (``gputok info``), the corpus job's worker rules (``is_gpu``, ``device_count``),
and the trainer's backends (``trainers``). A registration names the device's folder under
``gputok/backends/``, whose package offers:

    available() -> (bool, why)      without raising; no heavy import when the answer is no
    create(index=None) -> Backend   the backend (a ``DeviceBackend`` over the device adapter)
    device_count() -> int           with ``indexed``: how many devices there are

and, where it trains (``trainer``), a module with ``available()`` and ``train_arrays(ids,
offsets, counts, vocab, *, vocab_size, min_frequency, on_merge)``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Registration:
    """One device. ``name``: its backend name; ``package``: its folder (module path);
    ``auto``: ``backend="auto"`` tries it, in ``DEVICES`` order; ``gpu``: one process drives it
    (a corpus job gives it one worker, spawned rather than forked: a GPU context does not
    survive fork); ``indexed``: ``"<name>:<i>"`` picks device i; ``trainer``: the module of its
    training side (None: it does not train); ``train_auto``: ``train_bpe(backend="auto")``
    tries it."""

    name: str
    package: str
    auto: bool = True
    gpu: bool = False
    indexed: bool = False
    trainer: "str | None" = None
    train_auto: bool = False

    def module(self):
        return importlib.import_module(self.package)


DEVICES = (
    Registration("cuda", "gputok.backends.cuda", gpu=True, indexed=True,
                 trainer="gputok.backends.cuda.train", train_auto=True),
    Registration("metal", "gputok.backends.metal", gpu=True,
                 trainer="gputok.backends.metal.train"),
    Registration("native", "gputok.backends.native"),
)


def registration(name: str) -> "Registration | None":
    """The registration of a backend name (``"cuda:1"`` is cuda's), or None (numpy, unknown)."""
    kind = name.partition(":")[0]
    return next((r for r in DEVICES if r.name == kind), None)


def is_gpu(name: str) -> bool:
    """Whether backend ``name`` drives a GPU (one process per device)."""
    reg = registration(name)
    return reg is not None and reg.gpu


def device_count(kind: str) -> int:
    """How many devices of an indexed kind there are; ``RuntimeError`` saying why when there
    are none (or the kind has no index)."""
    reg = registration(kind)
    if reg is None or not reg.indexed:
        raise RuntimeError(f"{kind!r} is not a device with an index")
    return reg.module().device_count()


def trainers(name: str) -> list:
    """(name, trainer module) of the devices ``train_bpe(backend=name)`` may use, in order:
    the one named, or for ``"auto"`` those that ``train_auto``."""
    regs = [r for r in DEVICES if r.trainer is not None
            and (r.name == name or (name == "auto" and r.train_auto))]
    return [(r.name, importlib.import_module(r.trainer)) for r in regs]


def trainer_names() -> tuple:
    """The backend names the trainer accepts, ``"auto"`` and ``"numpy"`` first."""
    return ("auto", "numpy") + tuple(r.name for r in DEVICES if r.trainer is not None)
