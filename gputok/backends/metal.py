"""The metal backend (see its issue): reports itself unavailable until its kernels land."""

from __future__ import annotations


def available() -> tuple[bool, str]:
    return False, "not implemented yet in this version of gputok"


def create():
    raise RuntimeError("the metal backend is not available: " + available()[1])
