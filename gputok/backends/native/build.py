"""Building the native CPU device's module: the kernel sources compiled by the host's C++ compiler.

The module is one shared library made of:

* one translation unit of every encode kernel file (``kernels/encode_*.cu`` except the block
  scans of ``encode_scan.cu``): ``kernels/dialect_host.h`` (the CUDA dialect for a host
  compiler), the constants, then each file's exact source as every device gets it (headers
  expanded, a header the files share once), then the host-only launch sequences
  (``HOST_EXTRAS``: ``kernels/host_merge.h``, the merge stage of a few host-cut pieces as one
  call, ``NativeDevice.merge_inline``; ``kernels/host_chunk.h``, a chunk's whole sequence as one
  call, ``NativeDevice.chunk_inline``; ``kernels/host_spm.h``, a SentencePiece chunk's;
  ``kernels/host_unigram.h``, the Unigram lattice), then a generated launch table per file
  (``ENC_HOST_KERNEL(name)`` per kernel);
* the runtime (``kernels/host_runtime.h``): the worker pool, the launch entry point and the host
  prefix scans;
* the JSON-lines reader (``kernels/host_jsonl.h``, host only: ``corpus.read_batches`` with
  ``packed=True``, what ``gputok encode`` reads with), the str packer (``kernels/host_pack.h``:
  Python str documents as UTF-8 without the interpreter's lock, ``stages/pack.py``) and the id
  lists (``kernels/host_lists.h``: token ids as a list of int whose recurring ids share their
  object, ``stages/lists.py``);
* the pattern matcher (``kernels/host_regex.h``): a pre-tokenizer no scanner knows, cut on the
  host's cores, and BERT's normaliser and pre-tokenizer (``kernels/host_bert.h``), in one unit
  (``native/pattern.py``);
* BPE training's word counter and merge loop (``kernels/host_train_words.h``,
  ``kernels/host_train_spm_words.h``, ``kernels/host_train_spm.h``,
  ``kernels/host_train_merge.h``, their own unit; SentencePiece training's normaliser is the
  encoder's, exported from the kernels' unit by ``kernels/host_train_norm.h``:
  ``gputok/train/native.py``, ``gputok/train/spm.py``);
* the per-document pass (``kernels/cpu_encode.h`` and the batch over threads it ends with:
  pre-tokenization, a piece cache and the merge rule fused, one document at a time; the shared
  rules expanded in its own unit).

Nothing is compiled at install time (``pip install`` needs no compiler): the first use builds the
library, saying so on stderr ("building the CPU kernels (one time, ~15 s)", then how long it
took; ``built_seconds`` keeps the total for a job's summary), into the cache
(``$GPUTOK_CACHE``, default ``~/.cache/gputok``, under ``native/``),
named by a digest of every translation unit's full text, the compiler's identity (path and
``--version``) and the flags; later processes load it in milliseconds. The compiler is
``$GPUTOK_CXX``, else ``$CXX``, else the first of ``c++``, ``g++``, ``clang++`` on ``PATH``;
``$GPUTOK_NATIVE_FLAGS`` adds flags (e.g. ``-march=native``).

Performance notes: ``-O2`` and ``-O3`` measured the same on the encode kernels (the hot loops
are hash probes and byte walks, not vectorisable arithmetic); ``-march=native`` is left to
``$GPUTOK_NATIVE_FLAGS`` because it ties a cached library to one CPU model. One compiler
process for all units (~6 s for -O2 on the 2-core box) beat one per unit in parallel there.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..._cache import cache_dir, write_atomic
from .. import kernels

#: kernel files compiled for the host; encode_scan.cu's block scans (shared memory, barriers)
#: have a host form in the runtime instead (NativeDevice.scan), and encode_merge_huge.cu's
#: block-wide merge is for GPUs (a host thread merges a long piece alone, fast enough there)
HOST_FILES = tuple(f for f in kernels.ENCODE_FILES
                   if f not in ("encode_scan.cu", "encode_merge_huge.cu"))
#: host-only code after the kernels in their unit: launch sequences that call kernels directly
HOST_EXTRAS = ("host_merge.h", "host_chunk.h", "host_spm.h", "host_unigram.h", "host_train_norm.h")
#: BPE training's host code, one unit of its own (it calls the pre-tokenizer through its export)
TRAIN_FILES = ("host_train_words.h", "host_train_spm_words.h", "host_train_spm.h",
               "host_train_merge.h")
#: the per-document pass, a unit of its own (the shared rules it includes expanded there)
CPU_FILE = "cpu_encode.h"
BASE_FLAGS = ("-O2", "-std=c++17", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden")
ABI = 2  # gputok_native_abi() of host_runtime.h; a mismatch rebuilds
LIB_NAME = "gputok_native"


class NativeBuildError(RuntimeError):
    """The host compiler failed on the kernel sources (the message has its output)."""


def cache_root() -> Path:
    return Path(cache_dir("native"))


def _identity_memo(path: str) -> "Path | None":
    """Where the ``--version`` line of the compiler at ``path`` is kept: keyed by the resolved
    file's size, mtime and inode, so an upgraded or replaced compiler is asked again. Running
    ``c++ --version`` was 5-20 ms of every process's first encode on the native device."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    key = f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}".encode()
    return cache_root() / "compilers" / hashlib.sha256(key).hexdigest()[:32]


@functools.lru_cache(maxsize=None)
def _compiler_identity(path: str) -> "str | None":
    memo = _identity_memo(path)
    if memo is not None:
        try:
            known = memo.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            known = ""
        if known:
            return known
    import subprocess  # (here: not imported by a process that finds its identity memo)

    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    ident = (r.stdout.strip().splitlines() or ["?"])[0]
    if memo is not None:
        write_atomic(str(memo), ident.encode("utf-8"))  # (best effort: False when read-only)
    return ident


def find_compiler() -> tuple["str | None", str]:
    """(path, description) of the C++ compiler to use, or (None, why there is none)."""
    for env in ("GPUTOK_CXX", "CXX"):
        want = os.environ.get(env)
        if want:
            path = shutil.which(want)
            if path is None:
                return None, f"${env}={want!r} is not an executable on PATH"
            ident = _compiler_identity(path)
            if ident is None:
                return None, f"${env}={want!r} does not answer --version"
            return path, f"{ident} (${env})"
    for name in ("c++", "g++", "clang++"):
        path = shutil.which(name)
        if path is not None:
            ident = _compiler_identity(path)
            if ident is not None:
                return path, ident
    return None, ("no C++ compiler found (install g++ or clang++, or set $CXX); the numpy "
                  "backend runs instead")


@functools.lru_cache(maxsize=None)
def isa_flags() -> tuple:
    """``-mssse3`` where this machine's x86-64 CPU has SSSE3 (the per-document pass's class
    scans, 16 bytes a step: kernels/cpu_text.h) and ``-mpopcnt`` where it has POPCNT (the class
    scan counts a region's non-ASCII bytes a word at a time: without it each count was a call
    into the compiler's runtime, ~4% of a warm pass's instructions), else nothing. Part of the
    flags, so of the library's key: a machine without them builds a library of its own.
    Tried and dropped: ``-msse4.2 -mavx2 -mbmi -mbmi2`` on top, 0.98-1.03x on the warm pass
    (bench/ab_warm.py --b-env, cl100k / o200k / Llama 3, five rounds, a quiet box): not worth
    another library key."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = line.split()
                    return tuple(f"-m{f}" for f in ("ssse3", "popcnt") if f in have)
    except OSError:
        pass
    return ()


def flags() -> tuple:
    python = python_header()
    extra = os.environ.get("GPUTOK_NATIVE_FLAGS", "")
    if extra:
        import shlex  # (only then: importing it was ~1 ms of every process's first encode)

        extra = shlex.split(extra)
    return (BASE_FLAGS + isa_flags() + ((f"-I{python[0]}",) if python else ()) + tuple(extra))


@functools.lru_cache(maxsize=None)
def python_header() -> "tuple[str, str] | None":
    """(include directory, the interpreter's ABI) where this CPython's ``Python.h`` is
    installed, else None: the str packer (``host_pack.h``) reads str objects through the
    interpreter's public C API, so it is built against this interpreter's header (and the
    library's key changes with the interpreter); without the header there is no native str
    packer and Python encodes str documents."""
    import sys
    import sysconfig

    if sys.implementation.name != "cpython":
        return None
    inc = sysconfig.get_paths().get("include")
    if not inc or not os.path.isfile(os.path.join(inc, "Python.h")):
        return None
    return inc, f"{sys.implementation.cache_tag} {sysconfig.get_config_var('SOABI')}"


_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*$", re.M)


def _read(name: str) -> str:
    return (kernels.kernel_dir() / name).read_text("utf-8")


def _unit_text(text: str) -> str:
    # headers arrive expanded in one file: "#pragma once" would only warn there
    return _PRAGMA_ONCE.sub("// (pragma once)", text)


def translation_units() -> dict[str, str]:
    """{file name: full C++ text} of every unit of the library (what the digest covers)."""
    dialect = _read("dialect_host.h")
    # every kernel file in one unit (a shared header once): the host-only launch sequences
    # (HOST_EXTRAS) call kernels of several files, their signatures checked by the compiler
    text = kernels.defines_block(tuple(kernels.kernel_constants().items())) + \
        kernels.sources(HOST_FILES)
    tables = ""
    for f in HOST_FILES:
        stem = f.rsplit(".", 1)[0]
        entries = "".join(f"    ENC_HOST_KERNEL({k}),\n"
                          for k in kernels.kernel_names(kernels.source(f)))
        tables += (f'extern "C" __attribute__((visibility("default"))) const enc_host_kernel*\n'
                   f"gputok_native_table_{stem}(int* count) {{\n"
                   f"  static const enc_host_kernel table[] = {{\n{entries}  }};\n"
                   f"  *count = (int)(sizeof(table) / sizeof(table[0]));\n  return table;\n}}\n")
    extras = "".join(f'\n#line 1 "{x}"\n{_read(x)}\n' for x in HOST_EXTRAS)
    units = {"encode_kernels.cpp": _unit_text(
        f'#line 1 "dialect_host.h"\n{dialect}\n#line 1 "<constants>"\n{text}\n{extras}'
        f'#line 1 "<launch tables>"\n{tables}')}
    units["host_runtime.cpp"] = _unit_text(f'#line 1 "dialect_host.h"\n{dialect}\n'
                                 f'#line 1 "host_runtime.h"\n{_read("host_runtime.h")}')
    python = python_header()
    py_head = ('#define GPUTOK_HOST_PYTHON 1\n#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n'
               f'// (the interpreter: {python[1]})\n' if python else "")
    units["host_jsonl.cpp"] = _unit_text(
        f'{py_head}#define ENC_HOST_EXPORT extern "C" __attribute__((visibility("default")))\n'
        f'#line 1 "host_jsonl.h"\n{_read("host_jsonl.h")}\n'
        f'#line 1 "host_corpus.h"\n{_read("host_corpus.h")}\n'
        f'#line 1 "host_pack.h"\n{_read("host_pack.h")}\n'
        f'#line 1 "host_lists.h"\n{_read("host_lists.h")}\n'
        f'#line 1 "host_join.h"\n{_read("host_join.h")}')
    # BPE training (gputok/train/native.py): word counting and the merge loop
    units["host_train.cpp"] = _unit_text("".join(f'#line 1 "{x}"\n{_read(x)}\n'
                                                 for x in TRAIN_FILES))
    units["host_regex.cpp"] = _unit_text(f'#line 1 "host_regex.h"\n{_read("host_regex.h")}\n'
                                         f'#line 1 "host_bert.h"\n{_read("host_bert.h")}')
    units["cpu_encode.cpp"] = _unit_text(
        f'#line 1 "dialect_host.h"\n{dialect}\n#line 1 "<constants>"\n'
        f'{kernels.defines_block(tuple(kernels.kernel_constants().items()))}'
        f'#line 1 "{CPU_FILE}"\n{kernels.sources((CPU_FILE,))}')
    return units


def library_key(cxx: str, units: dict, flag_list: tuple) -> str:
    h = hashlib.sha256()
    h.update(f"abi {ABI}\ncompiler {cxx}\n{_compiler_identity(cxx)}\nflags {flag_list}\n"
             .encode())
    for name in sorted(units):
        h.update(f"\0{name}\0".encode() + units[name].encode())
    return h.hexdigest()[:24]


def library_path() -> tuple[Path, str, dict, tuple]:
    """(where the library for the current sources and compiler lives, compiler, units, flags)."""
    cxx, why = find_compiler()
    if cxx is None:
        raise NativeBuildError(why)
    units = translation_units()
    fl = flags()
    key = library_key(cxx, units, fl)
    return cache_root() / f"{LIB_NAME}-{key}.so", cxx, units, fl


def _stamp(cxx: str, fl: tuple) -> str:
    """A cheap key of what ``library_key`` digests: the compiler, flags and constants, and the
    name, size and modification time of every kernel file and of the code that assembles the
    units (this module, ``kernels.py``). A file that changes gets a new stamp."""
    h = hashlib.sha256(f"abi {ABI}\ncompiler {cxx}\n{_compiler_identity(cxx)}\nflags {fl}\n"
                       f"constants {sorted(kernels.kernel_constants().items())}\n".encode())
    files = sorted(p for p in Path(kernels.kernel_dir()).rglob("*") if p.is_file())
    for p in files + [Path(__file__), Path(kernels.__file__)]:
        st = p.stat()
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:24]


def build(compile: bool = True) -> "Path | None":
    """The library's path, built first when the cache does not have it (``compile=False``:
    None then). The path is found by the sources' stamp first (``_stamp``, recorded next to
    the libraries when the key was last digested from the full text): expanding every unit
    again costs ~15 ms a process."""
    cxx, why = find_compiler()
    if cxx is None:
        raise NativeBuildError(why)
    known = cache_root() / f"{LIB_NAME}-{_stamp(cxx, flags())}.key"
    try:
        got = cache_root() / f"{LIB_NAME}-{known.read_text().strip()}.so"
        if got.exists():
            return got
    except OSError:
        pass
    path, cxx, units, fl = library_path()
    if not path.exists():
        if not compile:
            return None
        _compile(path, cxx, units, fl)
    write_atomic(str(known), path.name[len(LIB_NAME) + 1:-len(".so")].encode())  # the key
    return path


#: seconds this process spent compiling the library (a job reports them beside its own time)
built_seconds = 0.0


def _say(line: str) -> None:
    import sys

    print(f"gputok: {line}", file=sys.stderr, flush=True)


def _compile(path: Path, cxx: str, units: dict, fl: tuple) -> None:
    """Compile ``units`` into the library at ``path`` (atomically: renamed into place), saying
    so on stderr: a silent 15 s behind a first encode looks like a hang."""
    import time

    global built_seconds
    _say(f"building the CPU kernels (one time, ~15 s) into {path.parent}")
    t0 = time.perf_counter()
    try:
        _run_compiler(path, cxx, units, fl)
    finally:
        took = time.perf_counter() - t0
        built_seconds += took
    _say(f"built the CPU kernels in {took:.1f} s")


def _run_compiler(path: Path, cxx: str, units: dict, fl: tuple) -> None:
    import shlex
    import subprocess

    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=path.parent))
    for name, text in units.items():
        (work / name).write_text(text, "utf-8")
    tmp = work / path.name
    cmd = [cxx, *fl, *[str(work / n) for n in units], "-o", str(tmp)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        raise NativeBuildError(f"could not run the C++ compiler ({' '.join(cmd[:2])} ...): {e}")
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-40:])
        raise NativeBuildError(
            f"the C++ compiler failed on gputok's kernels (units kept in {work}):\n"
            f"$ {shlex.join(cmd)}\n{tail}\nset $GPUTOK_CXX to another compiler, or use "
            "backend='numpy'")
    os.replace(tmp, path)  # atomic: a concurrent build of the same key is harmless
    shutil.rmtree(work, ignore_errors=True)
