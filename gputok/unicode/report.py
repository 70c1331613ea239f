"""How far the installed ``regex`` and Python's ``unicodedata`` are from the pinned oracle data.

``python -m gputok.unicode.report`` prints, per family and atom, the number of code points where
the installed ``regex`` release's ``\\p{..}`` / ``\\s`` / ``\\d`` / ``\\w`` disagrees with the
oracle's (what an unpinned pattern would get wrong), then the code points whose NFC / NFD / NFKC /
NFKD / lower-case image differs between Python's ``unicodedata`` and HF's normalisers, and the
load time of ``class_flags``. A diagnostic: nothing in gputok depends on its output.
"""

from __future__ import annotations

import subprocess
import sys
import unicodedata

import regex

from . import normalization as normalize, store
from .catalog import ESCAPES
from .installed import installed_set

__all__ = ["regex_disagreements", "unicodedata_disagreements", "main"]


def regex_disagreements(family: str) -> dict:
    """atom -> number of non-surrogate code points where the installed regex differs."""
    f = store.load(family)
    out = {}
    for atom in f.meta["atoms"]:
        if atom.startswith(("(?i)", "[]", "^")):  # context variants: see sets.variant
            continue
        have = installed_set(atom if atom in ESCAPES else "\\p{%s}" % atom)
        if have is None:
            out[atom] = None
            continue
        diff = store.symmetric_difference(have, f.get(atom))
        diff = store.difference(diff, [[0xD800, 0xDFFF]])
        out[atom] = int((diff[:, 1] - diff[:, 0] + 1).sum())
    return out


def unicodedata_disagreements() -> dict:
    """form -> number of single code points Python's unicodedata maps unlike HF (and "ccc")."""
    cps = [c for c in range(1, store.MAX_CP + 1) if not 0xD800 <= c <= 0xDFFF]
    joined = "\x00".join(map(chr, cps))
    out = {}
    for form in normalize.FORMS:
        ours = normalize.normalize(form, joined).split("\x00")
        py = unicodedata.normalize(form, joined).split("\x00")
        out[form] = sum(a != b for a, b in zip(ours, py))
    ours = normalize.lowercase(joined).split("\x00")
    out["lower"] = sum(a != b for a, b in zip(ours, joined.lower().split("\x00")))
    table = normalize._data().ccc_table
    out["ccc"] = sum(int(table[c]) != unicodedata.combining(chr(c)) for c in cps)
    return out


def main() -> int:
    print(f"installed regex {regex.__version__}; Python unicodedata {unicodedata.unidata_version}")
    for family in store.FAMILIES:
        d = regex_disagreements(family)
        bad = {k: v for k, v in d.items() if v}
        print(f"{family} (Unicode {store.load(family).meta['unicode']}): regex differs on "
              f"{sum(v for v in bad.values() if v)} code points over {len(bad)} of {len(d)} "
              f"atoms: " + ", ".join(f"{k}={v}" for k, v in sorted(bad.items())))
    print("unicodedata vs HF normalisers (single code points):", unicodedata_disagreements())
    code = ("import time,gputok.unicode as u;t=time.perf_counter();u.class_flags('%s');"
            "print(round(1000*(time.perf_counter()-t),1))")
    for family in store.FAMILIES:
        ms = [float(subprocess.run([sys.executable, "-c", code % family], capture_output=True,
                                   text=True, check=True).stdout) for _ in range(5)]
        print(f"class_flags({family!r}) first call in a fresh process: best {min(ms)} ms, "
              f"median {sorted(ms)[2]} ms")
    sizes = {p.name: p.stat().st_size for p in sorted(store._DATA_DIR.glob("*.ucd"))}
    print("data files:", sizes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
