"""The interface each Metal shader declares, read in one place for the backend and the emulator.

A shader (``shaders/*.metal``) is the *body* of an ``mx.fast.metal_kernel``: MLX writes the
function signature from the names and dtypes it is given. So the body carries them itself, in an
interface comment, and nothing else in gputok or its tests repeats them::

    // gpuemu: name=train_find_matches inputs=tok:int32,prv:int32,a:int32:0 outputs=is_start:uint8
    // gpuemu: template=BLOCK:256 header=train_common.metal atomic_outputs=false

* ``inputs`` / ``outputs``: ``name:dtype`` in signature order (numpy dtype names); ``:0`` marks a
  0-d input, which MLX passes as ``const constant T&`` (a value), not a pointer;
* ``template``: fixed template arguments (dtype names, integers, true/false);
* ``header``: a file next to the body (``// gpuemu: header`` marks it) pasted before the function,
  as ``metal_kernel(header=...)`` does; its ``#include "..."`` lines are expanded here, searching
  its own directory, then the CUDA kernels' directory (``kernels/common/*.h`` are the rules shared
  with CUDA), because the text MLX compiles at run time has no include path (the expander is
  ``kernels.expand_includes``, every dialect's), after the ``#define`` block of the constants
  Python owns (``kernels.kernel_constants``, as CUDA and the native build get them);
* ``atomic_outputs`` / ``ensure_row_contiguous``: MLX's flags of the same names.

The Metal kernels (``kernels.py``) are built from ``load(name)``; the emulator
(``tests/emulator``) parses the same comment with ``parse`` to compile and run the same body.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..kernels import defines_block, expand_includes, kernel_constants

__all__ = ["Interface", "Shader", "parse", "load", "shader_names", "expand_includes"]  # noqa

_LINE = re.compile(r"^[ \t]*//[ \t]*gpuemu:(.*)$", re.M)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)
_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Interface:
    """What ``mx.fast.metal_kernel`` and its call need from a shader, as the shader declares it."""

    name: str | None = None
    inputs: tuple = ()  # (name, numpy dtype, ndim: 0 or 1)
    outputs: tuple = ()  # (name, numpy dtype)
    template: tuple = ()  # (name, numpy dtype | int | bool)
    header: str | None = None
    atomic_outputs: bool = False
    ensure_row_contiguous: bool = True
    is_header: bool = False

    @property
    def input_names(self) -> list[str]:
        return [n for n, _, _ in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [n for n, _ in self.outputs]

    @property
    def output_dtypes(self) -> list[np.dtype]:
        return [d for _, d in self.outputs]


@dataclass(frozen=True)
class Shader:
    """A shader body ready for ``metal_kernel``: its interface, body and expanded header."""

    name: str
    path: Path
    interface: Interface
    source: str
    header: str = ""
    digest: str = field(default="", compare=False)  # sha256 of source + header

    @property
    def kernel_name(self) -> str:
        """The name given to MLX: the shader's name plus its digest, so that MLX's own library
        cache (keyed by the name) can never serve a previous version of the source."""
        return f"{self.name}_{self.digest[:12]}"


def _where(origin: str, text: str, pos: int) -> str:
    return f"{origin}:{text.count(chr(10), 0, pos) + 1}"


def _dtype(value: str, where: str) -> np.dtype:
    try:
        return np.dtype(value)
    except TypeError:
        raise ValueError(f"{where}: unknown dtype {value!r} in the interface comment "
                         "(use numpy names: int32, uint8, float32, ...)") from None


def parse(text: str, *, origin: str = "<shader>") -> Interface | None:
    """The interface declared by ``// gpuemu:`` comments in ``text``; None when there is none.

    >>> parse("// gpuemu: name=k inputs=x:int32,n:int64:0 outputs=y:uint8").inputs[1][1:]
    (dtype('int64'), 0)
    """
    found = list(_LINE.finditer(text))
    if not found:
        return None
    spec: dict[str, Any] = {"inputs": [], "outputs": [], "template": []}
    seen: set[str] = set()
    for m in found:
        where = _where(origin, text, m.start())
        for tok in m.group(1).split():
            if tok == "header":
                spec["is_header"] = True
                continue
            key, eq, val = tok.partition("=")
            if not eq:
                raise ValueError(f"{where}: expected key=value in the interface comment, got "
                                 f"{tok!r}")
            if key in ("inputs", "outputs"):
                for item in filter(None, val.split(",")):
                    parts = item.split(":")
                    if len(parts) not in (2, 3) or not _NAME.fullmatch(parts[0]):
                        raise ValueError(f"{where}: {key} entries are name:dtype or "
                                         f"name:dtype:0, got {item!r}")
                    if parts[0] in seen:
                        raise ValueError(f"{where}: {parts[0]!r} is declared twice")
                    seen.add(parts[0])
                    dt = _dtype(parts[1], where)
                    if key == "outputs":
                        spec[key].append((parts[0], dt))
                        continue
                    if len(parts) == 3 and parts[2] != "0":
                        raise ValueError(f"{where}: only ':0' (a 0-d input) may follow the "
                                         f"dtype, got {item!r}")
                    spec[key].append((parts[0], dt, 0 if len(parts) == 3 else 1))
            elif key == "template":
                for item in filter(None, val.split(",")):
                    k, _, v = item.partition(":")
                    if v in ("true", "false"):
                        spec["template"].append((k, v == "true"))
                    elif re.fullmatch(r"-?\d+", v):
                        spec["template"].append((k, int(v)))
                    else:
                        spec["template"].append((k, _dtype(v, where)))
            elif key in ("atomic_outputs", "ensure_row_contiguous"):
                if val.lower() not in ("true", "false"):
                    raise ValueError(f"{where}: {key} is true or false, got {val!r}")
                spec[key] = val.lower() == "true"
            elif key in ("name", "header"):
                spec[key] = val
            else:
                raise ValueError(f"{where}: unknown key {key!r} in the interface comment "
                                 "(known: name inputs outputs template header atomic_outputs "
                                 "ensure_row_contiguous)")
    for k in ("inputs", "outputs", "template"):
        spec[k] = tuple(spec[k])
    iface = Interface(**spec)
    if not iface.is_header and not iface.outputs:
        raise ValueError(f"{origin}: the interface declares no outputs (MLX needs at least one)")
    return iface


def _dirs() -> tuple[Path, Path]:
    from ..._resources import source_dir

    return source_dir("shaders"), source_dir("kernels")


def shader_names() -> list[str]:
    """The kernels among ``shaders/*.metal`` (header files left out), sorted."""
    shaders, _ = _dirs()
    names = []
    for p in sorted(shaders.glob("*.metal")):
        iface = parse(p.read_text("utf-8"), origin=str(p))
        if iface is not None and not iface.is_header:
            names.append(p.stem)
    return names


def load_file(path: "str | Path", *, search: "tuple[Path, ...] | None" = None) -> Shader:
    """A shader from any ``.metal`` body file (its header resolved next to it)."""
    path = Path(path)
    text = path.read_text("utf-8")
    iface = parse(text, origin=str(path))
    if iface is None:
        raise ValueError(f"{path}: no '// gpuemu: inputs=... outputs=...' interface comment; "
                         "MLX cannot generate the kernel's signature without it")
    if search is None:
        search = (_dirs()[1],)
    header = ""
    if iface.is_header:
        header, text = expand_includes(text, path=path, search=search), ""
    elif iface.header:
        h = path.parent / iface.header
        if not h.is_file():
            raise FileNotFoundError(f"{path}: header={iface.header} names a missing file {h}")
        header = expand_includes(h.read_text("utf-8"), path=h, search=search)
    if header:  # the constants every dialect takes from Python (kernels.kernel_constants)
        header = defines_block(tuple(kernel_constants().items())) + header
    if _INCLUDE.search(text):
        raise ValueError(f"{path}: a kernel body cannot #include (MLX pastes it inside a "
                         "function); put the include in its header file")
    digest = hashlib.sha256((text + "\0" + header).encode()).hexdigest()
    return Shader(name=iface.name or path.stem, path=path, interface=iface, source=text,
                  header=header, digest=digest)


def load(name: str) -> Shader:
    """The shader ``shaders/<name>.metal`` of this installation.

    >>> load("train_find_matches").interface.output_names
    ['is_start']
    """
    shaders, kernels = _dirs()
    path = shaders / f"{name}.metal"
    if not path.is_file():
        known = ", ".join(shader_names()) or "none"
        raise KeyError(f"no shader named {name!r} in {shaders} (known: {known})")
    return load_file(path, search=(kernels,))
