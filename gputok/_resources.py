"""Locate kernel and shader sources: inside the installed wheel, or at the top of a checkout."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def source_dir(kind: str) -> Path:
    """``kind`` is "kernels" or "shaders". Never relative to the working directory."""
    packaged = resources.files("gputok") / f"_{kind}"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / kind
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"gputok's {kind} sources are missing (broken install?)")
