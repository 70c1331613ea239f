"""Metal source text for the emulator: the rules a Mac enforces on it, and the rewrites that turn
MLX's Metal source into C++ for ``metal_shim.h``. Used by ``metal.py``; see README.md."""

from __future__ import annotations

import ctypes
import re
from typing import Any, Sequence

import numpy as np

from .runner import CompileError, strip_comments

MAX_BUFFERS = 31  # Metal's buffer argument table, shape/stride buffers included
MAX_THREADGROUP_BYTES = 32 * 1024
CONSTANT_BELOW = 8  # MLX passes an input with fewer elements in the constant address space

_FORBIDDEN = [
    (re.compile(r"\[\s*[&=]?\s*\]\s*(?:\(|\{|mutable\b)|\[\s*&\s*\w+\s*\]\s*\("), "lambda"),
    (re.compile(r"\bgoto\b"), "goto"),
    (re.compile(r"\b(?:try|catch|throw)\b"), "exceptions"),
    (re.compile(r"\bvirtual\b"), "virtual functions"),
    (re.compile(r"\bnew\s+[A-Za-z_(]|\bdelete\b\s*(?:\[\s*\])?\s*[A-Za-z_(]"), "new/delete"),
    (re.compile(r"\bthread_local\b"), "thread_local"),
    (re.compile(r"\bdynamic_cast\b"), "dynamic_cast"),
    (re.compile(r"\btypeid\b"), "typeid"),
]


class MetalError(CompileError):
    """The kernel would be rejected on a Mac (or mishandled by MLX): a Metal limit or rule."""


def _strip_metal_includes(text: str) -> str:
    return re.sub(r"^[ \t]*#[ \t]*include[ \t]*<metal_\w+>[^\n]*", "", text, flags=re.M)


def rewrite_threadgroup(text: str) -> str:
    """Metal ``threadgroup`` qualifiers: declarations become per-threadgroup static storage
    (``GPUEMU_SHARED``) and register their exact sizes (``GPUEMU_TG_SIZE``, for the 32 KiB
    check; the section's own size would include the host compiler's alignment padding);
    pointer/reference qualifiers are dropped. Comments are blanked first (same line numbers):
    the word "threadgroup" in prose is no declaration."""
    text = strip_comments(text)
    out, pos = [], 0
    for m in re.finditer(r"\bthreadgroup\b", text):
        if m.start() < pos:
            continue
        j, depth, kind = m.end(), 0, "decl"
        while j < len(text):
            c = text[j]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
            elif depth <= 0 and c in "*&":
                kind = "ptr"
                break
            elif depth <= 0 and c in ";=[,(){}":
                break
            j += 1
        out.append(text[pos:m.start()])
        if kind == "ptr":
            pos = m.end()
            continue
        end = _statement_end(text, m.end())
        names = _declarator_names(text[m.end():end])
        out.append("GPUEMU_SHARED" + text[m.end():end + 1])
        if names and end < len(text):
            out.append(" GPUEMU_TG_SIZE(" + ", ".join(f"sizeof({n})" for n in names) + ")")
        pos = end + 1
    out.append(text[pos:])
    return "".join(out)


def _statement_end(text: str, i: int) -> int:
    """Index of the ``;`` ending the declaration that starts at ``i`` (brackets skipped)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == ";" and depth <= 0:
            return i
        i += 1
    return len(text) - 1


def _declarator_names(decl: str) -> list[str]:
    """The variable names of ``T a[N], b`` (the text after ``threadgroup``, before ``;``)."""
    chunks, depth, cur = [], 0, ""
    for c in decl:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if c == "," and depth == 0:
            chunks.append(cur)
            cur = ""
        else:
            cur += c
    chunks.append(cur)
    names = []
    for chunk in chunks:
        head = re.split(r"[\[=]", chunk, maxsplit=1)[0]
        found = re.findall(r"[A-Za-z_]\w*", head)
        if found:
            names.append(found[-1])
    return names


_TEMPLATE_HEAD = re.compile(r"^template <([^\n]*)>\n(?=\[\[kernel\]\] void (\w+)\()", re.M)
_INSTANCE = re.compile(r'^template \[\[host_name\("(\w+)"\)\]\] \[\[kernel\]\] '
                       r"decltype\(\w+<([^\n]*)>\) \w+<[^\n]*>;$", re.M)


def detemplate(text: str) -> str:
    """MLX's source with the kernel's template arguments bound at namespace scope
    (``using T = float; constexpr int N = 4;``) in place of ``template <...>``, and the explicit
    instantiation dropped; line numbers unchanged. Why: g++ puts the static locals of a template
    instantiation in their own sections, so the emulator's threadgroup storage (one section,
    poisoned between threadgroups) and the size records of the 32 KiB check must not be in one."""
    return "".join(detemplate_parts(["", text, "", ""], tail_index=1))


def detemplate_parts(parts: list[str], tail_index: int = 3) -> list[str]:
    """``detemplate`` on ``MetalKernel._parts`` (header, signature, body, rest): the template
    head is in the signature, the instantiation in ``parts[tail_index]``."""
    parts = list(parts)
    head = _TEMPLATE_HEAD.search(parts[1])
    if head is None:
        return parts
    inst = _INSTANCE.search(parts[tail_index], head.end() if tail_index == 1 else 0)
    if inst is None or inst.group(1) != head.group(2):
        raise MetalError(f"{head.group(2)}: a kernel template without MLX's explicit "
                         "instantiation")
    binds = []
    for p, a in zip(head.group(1).split(","), inst.group(2).split(",")):
        kind, name = p.strip().rsplit(" ", 1)
        binds.append(f"using {name} = {a.strip()};" if kind == "typename"
                     else f"constexpr {kind} {name} = {a.strip()};")
    t = parts[tail_index]
    parts[tail_index] = t[:inst.start()] + t[inst.end():]
    sig = parts[1]
    parts[1] = sig[:head.start()] + " ".join(binds) + "\n" + sig[head.end():]
    return parts


def check_metal_text(text: str, label: str) -> None:
    """Reject C++ that Metal does not accept, and quoted includes (MLX has no include path)."""
    code = strip_comments(text)
    m = re.search(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', code, re.M)
    if m:
        raise MetalError(f"{label}: #include \"{m.group(1)}\": MLX compiles the source with no "
                         "include path (gputok.backends.metal.iface expands includes of shader headers)")
    for pattern, what in _FORBIDDEN:
        m = pattern.search(code)
        if m:
            line = code.count("\n", 0, m.start()) + 1
            raise MetalError(f"{label}:{line}: Metal does not support {what} "
                             f"({m.group(0).strip()!r})")


def check_threadgroup_bytes(lib: ctypes.CDLL, name: str) -> None:
    lib.gpuemu_metal_threadgroup_bytes.restype = ctypes.c_ulonglong
    used = int(lib.gpuemu_metal_threadgroup_bytes())
    if used > MAX_THREADGROUP_BYTES:
        raise MetalError(f"{name}: {used} bytes of threadgroup memory; Metal allows at most "
                         f"{MAX_THREADGROUP_BYTES} (32 KiB)")


def check_init_value(value: Any, output_dtypes: Sequence[Any], name: str) -> None:
    """MLX fills outputs through a float32 scalar: the value must survive that, and fit every
    output's dtype."""
    v = float(value)
    if float(np.float32(v)) != v:
        raise MetalError(f"{name}: init_value={value!r} is not exactly a float32 "
                         f"({float(np.float32(v))!r}); MLX passes it as one (use 0 as 'empty')")
    for dt in map(np.dtype, output_dtypes):
        if dt.kind in "iub":
            info = np.iinfo(dt) if dt.kind != "b" else None
            ok = v == int(v) and (info is None and v in (0, 1) or
                                  info is not None and info.min <= v <= info.max)
            if not ok:
                raise MetalError(f"{name}: init_value={value!r} does not fit an output of "
                                 f"dtype {dt}")
