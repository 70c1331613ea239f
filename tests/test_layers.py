"""The package's layers: imports run downward only, and no modules import each other in a loop.

From the top: the command line and the API (``cli*``, ``encoding``, ``parity``, ``train``,
``export``, ``registry``, ``corpus``, ``loaders``, ``model``), the devices (``backends``), the
model's parts (``components``), the stages each part and device runs (``stages``), and the
pinned data and small helpers under them (``unicode``, ``ranks_cache``, ``_arrays`` ...).
Every import is read (module level and inside functions), as written in the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "gputok"

# what a layer's modules must never import (a lower layer reaching up)
FORBIDDEN = {
    "gputok.unicode": ("gputok.stages", "gputok.components", "gputok.backends",
                       "gputok.loaders", "gputok.model", "gputok.encoding", "gputok.corpus",
                       "gputok.train", "gputok.cli"),
    "gputok.stages": ("gputok.components", "gputok.backends", "gputok.loaders", "gputok.model",
                      "gputok.encoding", "gputok.corpus", "gputok.train", "gputok.cli"),
    "gputok.components": ("gputok.backends", "gputok.loaders", "gputok.encoding",
                          "gputok.corpus", "gputok.train", "gputok.cli", "gputok.registry"),
    "gputok.backends": ("gputok.loaders", "gputok.encoding", "gputok.corpus", "gputok.cli",
                        "gputok.registry", "gputok.parity", "gputok.export"),
    "gputok.loaders": ("gputok.encoding", "gputok.corpus", "gputok.cli", "gputok.parity"),
    "gputok.corpus": ("gputok.cli", "gputok.parity"),
}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set:
    """The gputok modules ``path`` imports (a ``from X import y`` where ``X.y`` is a module
    counts as importing ``X.y``)."""
    name = _name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("gputok"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("gputok"):
                continue
            subs = [f"{mod}.{a.name}" for a in node.names]
            found = [m for m in subs if _path(m) is not None]
            out.update(found if found else [mod])
    return {m for m in out if _path(m) is not None} - {name}


def _path(mod: str) -> "Path | None":
    p = ROOT.joinpath(*mod.split("."))
    for cand in (p.with_suffix(".py"), p / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _graph() -> dict:
    return {_name(p): _imports(p) for p in sorted(PKG.rglob("*.py"))}


def _cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan's)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _upward(graph: dict) -> list:
    bad = []
    for mod, deps in graph.items():
        for layer, banned in FORBIDDEN.items():
            if mod == layer or mod.startswith(layer + "."):
                bad += [f"{mod} -> {d}" for d in sorted(deps)
                        if any(d == b or d.startswith(b + ".") for b in banned)]
    return bad


def test_imports_run_downward():
    assert _upward(_graph()) == []


def test_no_modules_import_each_other_in_a_loop():
    # a package's __init__ that hands its modules' names on is not a loop with them
    graph = {m: {d for d in deps if not (m.startswith(d + ".") and _path(d).name == "__init__.py")}
             for m, deps in _graph().items()}
    assert _cycles(graph) == []


def test_the_checks_see_a_loop_and_an_upward_import():
    graph = {"gputok.stages.a": {"gputok.backends.b"}, "gputok.backends.b": {"gputok.stages.a"}}
    assert _upward(graph) == ["gputok.stages.a -> gputok.backends.b"]
    assert _cycles(graph) == [["gputok.backends.b", "gputok.stages.a"]]
    assert "gputok.stages.table" in _imports(PKG / "stages" / "spm_tables.py")
