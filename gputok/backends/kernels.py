"""Kernel sources, the constants they share with Python, and compiled-module caching.

One loader for every device and every kernel file (encode and training):

* ``source(file)``: the text of ``kernels/<file>`` with its local ``#include "..."`` headers
  expanded in place (``expand_includes``, the Metal headers' expander too), so a compiler cache
  keyed on the source text (CuPy's, MLX's, ours) sees every change, headers included;
* ``KERNEL_CONSTANTS``: every constant a kernel shares with Python, taken from the Python module
  that owns it (class codes and rule bits: ``stages/scan_rules.py``; hash constants:
  ``stages/table.py`` and ``device_tables.py``; marks: ``hostplan.py``; ...). ``build_source``
  prepends them as a ``#define`` block (the Metal shaders' headers get the same block,
  ``metal/iface.py``); the headers' ``#ifndef`` defaults only let a file compile alone, and a
  test asserts the defaults equal these values;
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

ENCODE_FILES = ("encode_pretok.cu", "encode_o200k.cu", "encode_nfc.cu", "encode_scan.cu",
                "encode_merge.cu", "encode_merge_huge.cu", "encode_emit.cu", "encode_wordpiece.cu",
                "encode_spm.cu")
#: threads per block of encode_merge_huge on a GPU (its block-shared arrays' size: the
#: ``ENC_HUGE_BLOCK`` of common/encode_merge_huge.h; a device may launch fewer)
HUGE_BLOCK = 1024
TRAIN_FILE = "train_bpe.cu"
#: threads per block of the training kernels and shaders (their reductions' shared arrays):
#: ``TRAIN_BLOCK`` of train_bpe.cu, the ``BLOCK`` template argument of shaders/train_*.metal
TRAIN_BLOCK = 256

ENC_CONT = 8  # class of a UTF-8 continuation byte (device-only: the host works on code points)
ENC_O_CONT = 15  # the same for the 4-bit o200k classes
ENC_DONE = 0xFFFFFFFF  # owner[e]: the entry's ids are final


@functools.lru_cache(maxsize=None)
def kernel_constants() -> dict:
    """{define name: int} of everything the encode kernels share with Python."""
    from ..components.segmenters import wordpiece as wp
    from ..stages import merge, scan_rules as r, split, spm_tables, table
    from . import device_tables as dt, hostplan as hp

    return spm_tables.KERNEL_CONSTANTS | {
        "ENC_X": r.X, "ENC_L": r.L, "ENC_N": r.N, "ENC_P": r.P, "ENC_A": r.A, "ENC_SP": r.SP,
        "ENC_S": r.S, "ENC_E": r.E, "ENC_CONT": ENC_CONT,
        "ENC_O_U": r.OU, "ENC_O_D": r.OD, "ENC_O_B": r.OB, "ENC_O_M": r.OM, "ENC_O_N": r.ON,
        "ENC_O_P": r.OP, "ENC_O_A": r.OA, "ENC_O_SL": r.OSL, "ENC_O_SP": r.OSP, "ENC_O_S": r.OS,
        "ENC_O_E": r.OE, "ENC_O_CONT": ENC_O_CONT,
        "ENC_SEG_START": hp.SEG_START, "ENC_SEG_END": hp.SEG_END, "ENC_OUTSIDE": hp.OUTSIDE,
        "ENC_SPECIAL_START": hp.SPECIAL_START,
        "ENC_NORMAL": hp.NORMAL, "ENC_GAP": split.NO_IDS, "ENC_DONE": ENC_DONE,
        "ENC_NO_MERGE": int(table.NO_MERGE), "ENC_EMPTY_KEY": int(table.EMPTY_KEY),
        "ENC_EMPTY_SLOT": dt.EMPTY_SLOT, "ENC_HASH_MUL": int(table.HASH_MUL),
        "ENC_LONG_PIECE": merge.LONG_PIECE, "ENC_HEAP_BLOCK": merge.HEAP_BLOCK,
        "ENC_ROUND_MIN_SHARE": merge.ROUND_MIN_SHARE, "ENC_HUGE_PIECE": merge.HUGE_PIECE,
        "ENC_HUGE_SEG": merge.HUGE_SEG, "ENC_HUGE_BLOCK": HUGE_BLOCK,
        "ENC_HUGE_ROUNDS_MIN": merge.HUGE_ROUNDS_MIN,
        "ENC_HUGE_ROUND_MERGES": merge.HUGE_ROUND_MERGES,
        "ENC_BYTES_SEED": dt.BYTES_SEED, "ENC_WORD_MUL": dt.WORD_MUL, "ENC_MIX1": dt.MIX1,
        "ENC_MIX2": dt.MIX2,
        "ENC_NO_TOKEN": wp.NO_TOKEN, "ENC_WP_ROOT": wp.ROOT,
        "ENC_PAIR_COMPACT": dt.PAIR_COMPACT, "ENC_PAIR_ID_BITS": dt.PAIR_ID_BITS,
        "ENC_PAIR_BYTES": dt.PAIR_BYTES, "ENC_WHOLE_BYTES": dt.WHOLE_BYTES,
    }


def c_literal(value: int) -> str:
    """An unsigned C literal of the right width (``u`` / ``ull``) for large values."""
    if value >= 1 << 32:
        return f"0x{value:X}ull"
    if value >= 1 << 31:
        return f"0x{value:X}u"
    return str(value)


def defines_block(defines) -> str:
    return "".join(f"#define {k} {v if isinstance(v, str) else c_literal(int(v))}\n"
                   for k, v in defines)


def kernel_dir():
    from .._resources import source_dir

    return source_dir("kernels")


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*$", re.M)


def expand_includes(text: str, *, path, search: tuple = (), seen: "set | None" = None) -> str:
    """``text`` (the file ``path``) with every ``#include "name"`` replaced by that file,
    recursively, each file once (``#pragma once`` lines dropped; ``<...>`` includes stay):
    the one expander of every dialect, for a compiler cache keyed on the text to see every
    header's change (CUDA and the native build: ``source``; Metal headers, whose text MLX
    compiles with no include path: ``metal/iface.py``). Names are looked up next to the
    including file, then in ``search``; ``seen`` (resolved paths) is shared by the files of
    one text, so a header they share is expanded once, where it is first included."""
    seen = set() if seen is None else seen
    seen.add(Path(path).resolve())

    def repl(m: re.Match) -> str:
        name = m.group(1)
        for d in (Path(path).parent, *search):
            f = (Path(d) / name).resolve()
            if f.is_file():
                break
        else:
            dirs = ", ".join(str(d) for d in (Path(path).parent, *search))
            line = text.count("\n", 0, m.start()) + 1
            raise FileNotFoundError(f"{path}:{line}: #include \"{name}\" not found (looked in "
                                    f"{dirs})")
        if f in seen:
            return ""
        body = expand_includes(f.read_text("utf-8"), path=f, search=search, seen=seen)
        return f"// ---- {name}\n{body.rstrip()}\n// ---- end of {name}"

    return _PRAGMA_ONCE.sub("", _INCLUDE.sub(repl, text))


@functools.lru_cache(maxsize=None)
def source(file: str) -> str:
    """``kernels/<file>`` with local includes expanded (``expand_includes``: next to the file
    that includes it, then in ``kernels/``)."""
    return sources((file,))


def sources(files: tuple) -> str:
    """``source`` of several files one after the other, as one text: a header the files share
    is expanded once, where the first of them includes it (one translation unit of them all:
    the native CPU device's)."""
    seen: set = set()
    root = kernel_dir()

    def expand(f: str) -> str:
        return expand_includes((root / f).read_text("utf-8"), path=root / f, search=(root,),
                               seen=seen)

    return "\n".join(f'#line 1 "{f}"\n' + expand(f) for f in files) if len(files) > 1 \
        else expand(files[0])


def build_source(file: str, extra_defines=()) -> tuple[str, str, tuple]:
    """(full source, its sha256, the defines) for one kernel file: the constants of
    ``kernel_constants()`` (encode files) plus ``extra_defines`` (which win over a constant of
    the same name: a test builds a kernel with a smaller threshold), then the expanded source."""
    defines = tuple(extra_defines)
    if file.startswith("encode_"):
        extra = dict(defines)
        defines = tuple((k, extra.pop(k, v)) for k, v in kernel_constants().items()) + \
            tuple(extra.items())
    text = defines_block(defines) + source(file)
    return text, hashlib.sha256(text.encode()).hexdigest(), defines


def kernel_names(text: str) -> list[str]:
    """The ``extern "C" __global__`` functions of a source."""
    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+'
                      r'(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)', text)
