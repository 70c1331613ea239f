"""gputok.unicode: the pinned Unicode data is what the oracle engines do, on every code point.

The oracles are the installed tiktoken (the Rust ``regex`` crate via fancy-regex) and HF
``tokenizers`` (Oniguruma; ``unicode-normalization-alignments``; Rust's ``char::to_lowercase``).
Each check probes them live: a probe string holding every non-surrogate code point goes through
the engine once (tiktoken: ``encode_ordinary`` with only the 256 byte tokens returns the matched
characters' bytes; HF: ``Split(..., "removed", invert=True)`` keeps the matches), so "equal" below
always means "equal on all 1,112,064 code points" unless a test says otherwise. Normaliser tests
live in ``test_unicode_normalize.py``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from gputok import unicode as gu
from gputok.unicode import sets, store
from gputok.unicode.catalog import ESCAPES

SURROGATES = store.normal([[0xD800, 0xDFFF]])


@functools.lru_cache(maxsize=None)
def all_text() -> str:
    cps = np.arange(0x110000, dtype=np.uint32)
    return cps[(cps < 0xD800) | (cps > 0xDFFF)].tobytes().decode("utf-32-le")


def hx(cp: int) -> str:
    return "\\x{%X}" % cp


def engine_class(r) -> str:
    """Ranges in the syntax both engines read (non-empty sets only)."""
    return "[" + "".join(hx(a) if a == b else hx(a) + "-" + hx(b) for a, b in r.tolist()) + "]"


def _tiktoken():
    try:
        import tiktoken
    except ImportError:
        pytest.skip("tiktoken is not installed: the tiktoken family cannot be probed live")
    return tiktoken


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        pytest.skip("tokenizers is not installed: the hf family cannot be probed live")
    return tokenizers


def probe(family: str, pat: str, text: str | None = None) -> np.ndarray:
    """Normal-form ranges of the characters of ``text`` (default: all) that ``pat`` matches."""
    text = all_text() if text is None else text
    if family == "tiktoken":
        tk = _tiktoken()
        enc = tk.Encoding("probe", pat_str="(?:%s)+" % pat,
                          mergeable_ranks={bytes([b]): b for b in range(256)}, special_tokens={})
        got = bytes(enc.encode_ordinary(text)).decode("utf-8")
    else:
        from tokenizers import Regex, pre_tokenizers

        _tokenizers()
        split = pre_tokenizers.Split(Regex("(?:%s)+" % pat), "removed", invert=True)
        got = "".join(p for p, _ in split.pre_tokenize_str(text))
    return store.from_code_points(np.frombuffer(got.encode("utf-32-le"), np.uint32))


def spelled(atom: str, negated: bool = False) -> str:
    if atom in ESCAPES:
        return atom.upper() if negated else atom
    return ("\\P{%s}" if negated else "\\p{%s}") % atom


def cps_text(r) -> str:
    """The characters of a set, separated by U+0000 (no two cased characters adjacent)."""
    return "\x00".join(map(chr, store.to_code_points(r).tolist()))


FAMILIES = pytest.mark.parametrize("family", gu.FAMILIES)


# ----------------------------------------------------------------------------------------------
# the data equals the engines
# ----------------------------------------------------------------------------------------------

def base_atoms(family: str) -> list:
    return [a for a in store.load(family).meta["atoms"] if not a.startswith(("(?i)", "[]", "^"))]


def no_surrogates(r):
    return store.difference(r, SURROGATES)


@FAMILIES
def test_every_atom_inside_brackets_equals_the_engine(family):
    """One probe checks every atom inside brackets, plain and negated: the engine evaluates
    [X--S] and [S--X] (Oniguruma, which has no --: [X&&S'] with S' the complement, and
    [S&&[^X]]) for each atom X with shipped set S, all in one class; it must match nothing."""
    parts = []
    for atom in base_atoms(family):
        for neg in (False, True):
            x = spelled(atom, neg)
            r = no_surrogates(sets.atom_set(family, atom, negated=neg, in_class=True))
            if len(r) == 0:
                parts.append("[%s]" % x)
            elif family == "tiktoken":  # [^S] would trip the crate's surrogate-gap quirk
                parts += ["[%s--%s]" % (x, engine_class(r)), "[%s--[%s]]" % (engine_class(r), x)]
            else:  # no nested [^...] of ranges from U+0000: Oniguruma mis-evaluates those
                rest = no_surrogates(store.complement(r))
                parts += ["[%s&&%s]" % (x, engine_class(rest))] if len(rest) else []
                parts += ["[%s&&[^%s]]" % (engine_class(r), x)]
    bad = probe(family, "[" + "".join(parts) + "]")
    assert len(bad) == 0, f"{family}: code points where a shipped set is wrong: {bad[:5]}"
    assert len(base_atoms(family)) >= 55 and "Han" in base_atoms(family)


@functools.lru_cache(maxsize=None)
def run_samples(family: str) -> str:
    """Both sides of every boundary of every shipped set, plus four code points inside each run
    where no set changes (U+0000-separated)."""
    f = store.load(family)
    cuts = {0, store.MAX_CP + 1}
    for atom in f.meta["atoms"]:
        r = f.get(atom)
        cuts.update(r[:, 0].tolist())
        cuts.update((r[:, 1] + 1).tolist())
    cuts = np.array(sorted(cuts))
    cps = set(cuts[:-1].tolist()) | set((cuts[1:] - 1).tolist())
    rng = np.random.default_rng(1)
    for _ in range(4):
        cps |= set(rng.integers(cuts[:-1], cuts[1:]).tolist())
    cps = [c for c in sorted(cps) if c and not 0xD800 <= c <= 0xDFFF]
    return "\x00".join(map(chr, cps))


@FAMILIES
def test_every_atom_outside_brackets_equals_the_engine(family):
    """X(?<!S) finds what X matches outside S; (?=S)(?!X). what S holds that X misses.

    Oniguruma: on every code point. The Rust crate builds the same class for \\p{X} inside
    and outside brackets (the bracket check above is exhaustive) and runs look-arounds ~100x
    slower (fancy-regex's backtracking VM, with a step limit per search), so there the probe
    covers both sides of every boundary of every shipped set and samples inside every run."""
    branches = []
    for atom in base_atoms(family):
        for neg in (False, True):
            x = spelled(atom, neg)
            r = no_surrogates(sets.atom_set(family, atom, negated=neg))
            if len(r) == 0:
                branches.append(x)
                continue
            branches.append("%s(?<!%s)" % (x, engine_class(r)))
            branches.append("(?=%s)(?!%s)[\\x{0}-\\x{10FFFF}]" % (engine_class(r), x))
    if family == "hf":
        bad = probe(family, "|".join(branches))
    else:
        text = run_samples(family)
        bad = store.EMPTY
        for k in range(0, len(branches), 12):  # fancy-regex: 1e6 backtracking steps a search
            bad = store.union(bad, probe(family, "|".join(branches[k:k + 12]), text))
        assert len(text) > 20_000
    assert len(bad) == 0, f"{family}: code points where a shipped set is wrong: {bad[:5]}"


@FAMILIES
def test_case_insensitive_atoms_equal_the_engine(family):
    """(?i:\\p{X}), (?i:\\P{X}) and (Rust crate) (?i:[\\p{X}]), per family, on every cased code
    point (the only ones (?i) can move; the next test checks the rest are caseless)."""
    keys = store.from_code_points(store.load(family).get("fold_keys"))
    text = cps_text(keys)
    for atom in base_atoms(family):
        for neg in (False, True):
            for in_class in (False, True) if family == "tiktoken" else (False,):
                want = store.intersect(sets.atom_set(family, atom, negated=neg, folded=True,
                                                     in_class=in_class), keys)
                x = spelled(atom, neg)
                got = probe(family, "(?i:%s)" % ("[%s]" % x if in_class else x), text)
                got = store.difference(got, [[0, 0]])  # the separator
                assert np.array_equal(got, no_surrogates(want)), (family, atom, neg, in_class)
    for ch in "abcdefghijklmnopqrstuvwxyz":
        got = store.difference(probe(family, "(?i:%s)" % ch, text), [[0, 0]])
        assert np.array_equal(got, store.load(family).get("(?i)" + ch)), (family, ch)
        assert np.array_equal(got, gu.ranges(family, "(?i:%s)" % ch.upper())), (family, ch)


@FAMILIES
def test_case_fold_orbits_equal_the_engine(family):
    keys = store.load(family).get("fold_keys")
    rest = store.difference(store.complement(store.from_code_points(keys)), SURROGATES)
    # every other code point is caseless: (?i) adds nothing to a class of all of them
    assert np.array_equal(probe(family, "(?i:%s)" % engine_class(rest)), rest)
    orbits = sorted({tuple(sets.orbit(family, int(c))) for c in keys})
    assert all(len(o) > 1 for o in orbits) and sum(map(len, orbits)) == len(keys)
    text = "\x00".join(map(chr, keys.tolist()))
    branches = []
    for o in orbits:
        members = engine_class(store.from_code_points(o))
        branches.append("(?i:%s)(?<!%s)" % (hx(o[0]), members))  # matches outside the orbit
        branches.append("(?=%s)(?!(?i:%s))[\\x{0}-\\x{10FFFF}]" % (members, hx(o[0])))  # missed
    # fancy-regex counts backtracking steps over a whole failed search (limit 1e6): chunk
    step = 40 if family == "tiktoken" else len(branches)
    for k in range(0, len(branches), step):
        assert len(probe(family, "|".join(branches[k:k + step]), text)) == 0, (family, k)


def test_multi_character_folds_equal_the_engine():
    """Oniguruma: (?i) lets one character match a string (U+00DF ~ "ss"); the Rust crate never."""
    for family in gu.FAMILIES:
        multi = set(store.to_code_points(sets.multi_fold(family)).tolist())
        for c in (chr(c) for c in range(0x80, 0x30000) if len(chr(c).casefold()) > 1
                  and not 0xD800 <= c <= 0xDFFF):
            t = c.casefold()
            got = probe(family, "(?i:%s)" % hx(ord(c)), t + "\x00" + t.upper())
            assert (len(got) > 0) == (ord(c) in multi), (family, hex(ord(c)))
    assert not sets.multi_fold("tiktoken").size and sets.multi_targets("tiktoken") == []
    assert {"ss", "st", "ff", "fi", "fl", "ffi", "ffl"} <= set(sets.multi_targets("hf"))


def test_class_flags_mean_what_they_say_in_tiktoken():
    flags = gu.class_flags("tiktoken")
    table = flags["table"]
    assert table.shape == (0x110000,) and table.dtype == np.uint8
    for bit, prop in gu.PROPERTIES.items():
        want = store.to_code_points(probe("tiktoken", prop))
        assert np.array_equal(np.flatnonzero(table & bit), want), prop
    for ch in gu.FOLD_LETTERS:
        want = store.to_code_points(probe("tiktoken", "(?i:%s)" % ch))
        assert flags["fold_" + ch].dtype == np.uint32
        assert np.array_equal(flags["fold_" + ch], want), ch
    assert flags["fold_s"].tolist() == [0x53, 0x73, 0x17F]
    # same bit values scan.py has always used
    assert (gu.F_L, gu.F_N, gu.F_S, gu.F_NL, gu.F_UP, gu.F_LO, gu.F_M) == (1, 2, 4, 8, 16, 32, 64)


def test_versions_and_the_installed_regex_module():
    """Unicode versions by marker code points, and how far the installed regex and Python's
    unicodedata are from them (reported, the pinned data does not depend on either)."""
    import regex

    assert gu.unicode_version("tiktoken") == "16.0" == gu.unicode_version("hf")
    assert gu.unicode_version("hf", table="normalize") == "9.0"
    assert gu.unicode_version("hf", table="lowercase") == "17.0"
    with pytest.raises(ValueError, match="only 'hf'"):
        gu.unicode_version("tiktoken", table="normalize")
    with pytest.raises(ValueError, match="known: tiktoken, hf"):
        gu.unicode_version("spm")
    mine = gu.member_table("tiktoken", r"\p{L}")
    assert mine[0x1C89] and not mine[0x323B0]
    theirs = np.zeros(0x110000, bool)
    text = all_text()
    for m in regex.finditer(r"\p{L}+", text):
        a, b = m.span()
        theirs[np.frombuffer(text[a:b].encode("utf-32-le"), np.uint32)] = True
    diff = int((mine != theirs).sum())
    print(f"regex {regex.__version__} vs tiktoken's \\p{{L}}: {diff} code points differ")
    assert diff == 0 or regex.match(r"\p{L}", "\U000323b0")  # differs only if regex is newer


# ----------------------------------------------------------------------------------------------
# ranges / member_table
# ----------------------------------------------------------------------------------------------

def test_ranges_and_member_table():
    assert gu.ranges("tiktoken", "(?i:k)").tolist() == [[0x4B, 0x4B], [0x6B, 0x6B],
                                                        [0x212A, 0x212A]]
    lu = gu.ranges("hf", "Lu")
    assert np.array_equal(lu, gu.ranges("hf", r"\p{Lu}"))
    assert np.array_equal(lu, gu.ranges("hf", "Uppercase_Letter"))
    assert np.array_equal(gu.ranges("hf", r"\P{Lu}"), no_surrogates(store.complement(lu)))
    # Oniguruma: U+00B2 (superscript two) is \w, but not [\w]; the Rust crate: neither
    assert gu.member_table("hf", r"\w")[0xB2] and not gu.member_table("hf", r"[\w]")[0xB2]
    assert not gu.member_table("tiktoken", r"\w")[0xB2]
    assert np.array_equal(gu.ranges("tiktoken", r"[\p{L}&&\p{Han}]"),
                          store.intersect(gu.ranges("tiktoken", "L"), gu.ranges("tiktoken", "Han")))
    assert np.array_equal(gu.ranges("tiktoken", r"[\p{L}--\p{Lu}]"),
                          store.difference(gu.ranges("tiktoken", "L"), gu.ranges("tiktoken", "Lu")))
    t = gu.member_table("hf", r"\s")
    assert t.dtype == bool and t.shape == (0x110000,) and not t.flags.writeable
    assert np.flatnonzero(t).tolist() == store.to_code_points(gu.ranges("hf", r"\s")).tolist()
    with pytest.raises(ValueError, match="unknown property 'Klingon'"):
        gu.ranges("tiktoken", "Klingon")
    with pytest.raises(ValueError, match="unknown Unicode family"):
        gu.ranges("icu", "L")


def test_data_files_are_small_and_reproducible(tmp_path):
    sizes = {p.name: p.stat().st_size for p in (Path(gu.__file__).parent / "data").glob("*.ucd")}
    assert set(sizes) == {"tiktoken.ucd", "hf.ucd", "hf_norm.ucd", "hf_bert.ucd", "graphemes.ucd"}
    assert all(s < 200_000 for s in sizes.values()), sizes
    f = store.load("hf")
    r = {a: f.get(a) for a in f.meta["atoms"]}
    raw = {k: f.get(k) for k, v in f.index.items() if v[2] == "raw"}
    n1 = store.write(tmp_path / "a.ucd", f.meta, r, raw)
    n2 = store.write(tmp_path / "b.ucd", f.meta, r, raw)
    assert n1 == n2 and (tmp_path / "a.ucd").read_bytes() == (tmp_path / "b.ucd").read_bytes()
    assert (tmp_path / "a.ucd").read_bytes() == (Path(gu.__file__).parent / "data/hf.ucd"
                                                 ).read_bytes()
    (tmp_path / "bad.ucd").write_bytes(b"nope")
    with pytest.raises(ValueError, match="regenerate it with"):
        store._File(tmp_path / "bad.ucd")


def test_runtime_needs_no_oracle():
    """Only the generator and the report talk to tiktoken / tokenizers / unicodedata."""
    import subprocess
    import sys

    code = ("import sys, gputok.unicode as gu; gu.class_flags('hf'); "
            "gu.compile_pinned(r'\\p{L}+', 'tiktoken'); gu.normalize('NFC', 'e\\u0301'); "
            "gu.lowercase('\\u0130'); import gputok.unicode.bert as b; b.tables(); "
            "print(sorted(m for m in ('tiktoken', 'tokenizers', "
            "'unicodedata2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "[]"
    runtime = ["__init__", "catalog", "flags", "installed", "normalization", "pattern", "sets",
               "store"]
    for name in runtime:
        src = (Path(gu.__file__).parent / f"{name}.py").read_text()
        assert "import unicodedata" not in src and "import tiktoken" not in src, name
