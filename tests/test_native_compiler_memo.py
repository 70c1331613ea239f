"""The native build's compiler identity (``c++ --version``'s first line, part of the library's
key) is kept in the cache keyed by the compiler file, so a process does not start the
compiler just to learn it; a changed compiler file is asked again, a failing one never kept."""

from __future__ import annotations

import os
import stat

import pytest

from gputok.backends.native import build as native_build

identity = native_build._compiler_identity.__wrapped__  # (the per-process lru_cache left out)


def _fake_compiler(tmp_path, version: str, rc: int = 0):
    """An executable that answers ``--version`` and counts its runs in ``runs.txt``."""
    path = tmp_path / "fakecxx"
    path.write_text(f"#!/bin/sh\necho x >> '{tmp_path}/runs.txt'\necho '{version}'\n"
                    f"echo 'second line'\nexit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _runs(tmp_path) -> int:
    runs = tmp_path / "runs.txt"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOK_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_the_identity_is_asked_once_then_read_from_the_cache(cache):
    cxx = _fake_compiler(cache, "fakecxx 1.0")
    assert identity(cxx) == "fakecxx 1.0"
    assert identity(cxx) == "fakecxx 1.0"
    assert _runs(cache) == 1


def test_a_changed_compiler_is_asked_again(cache):
    cxx = _fake_compiler(cache, "fakecxx 1.0")
    assert identity(cxx) == "fakecxx 1.0"
    _fake_compiler(cache, "fakecxx 2.00")  # another size (and mtime): another key
    assert identity(cxx) == "fakecxx 2.00"
    assert _runs(cache) == 2


def test_a_failing_compiler_is_not_kept(cache):
    cxx = _fake_compiler(cache, "broken", rc=1)
    assert identity(cxx) is None
    assert identity(cxx) is None
    assert _runs(cache) == 2


def test_a_missing_compiler_has_no_identity(cache):
    assert identity(str(cache / "absent")) is None
    assert not os.path.exists(cache / "cache" / "native" / "compilers")
