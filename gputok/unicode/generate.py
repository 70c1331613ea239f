"""Regenerate the pinned Unicode data by probing the oracles: ``python -m gputok.unicode.generate``.

Needs ``tiktoken`` and ``tokenizers`` (the versions whose behaviour gputok pins: tiktoken 0.14,
tokenizers 0.23). Every set is measured, not looked up: one probe string holds every non-surrogate
code point once, and the engine reports which of them an atom matches.

* tiktoken family: ``tiktoken.Encoding(pat_str=atom, mergeable_ranks=<the 256 single bytes>)``;
  ``encode_ordinary(all_chars)`` keeps only the matches (findall drops the rest) and, with only
  byte tokens, returns exactly their UTF-8 bytes (~0.1-0.5 s per atom).
* hf family: ``pre_tokenizers.Split(Regex(atom), "removed", invert=True)`` keeps the matches
  (~1-3 s per atom). HF's normalisers (NFD/NFKD/NFC/NFKC, Lowercase) are probed one code point at
  a time, all in one call, separated by U+0000 (a starter that composes with nothing and that no
  mapping produces). ``hf_bert.ucd``: the flags of HF's BertNormalizer / BertPreTokenizer,
  one code point at a time (``bert.build``; its mappings are hf_norm's, checked).

The output is byte-identical for identical oracle behaviour (sorted JSON header, no timestamps);
the library itself never imports tiktoken or tokenizers.
"""

from __future__ import annotations

import argparse
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np

from . import store
from .sets import variant, variant_key
from .catalog import ALIASES, ATOMS, CCC_MARKERS, ESCAPES, LOWERCASE_MARKERS, REGEX_MARKERS, loose

FORMAT = 1
SURROGATES = np.array([[0xD800, 0xDFFF]], np.int64)


def _all_text(ascii_too: bool = True) -> str:
    cps = np.arange(0x110000, dtype=np.uint32)
    keep = (cps < 0xD800) | (cps > 0xDFFF)
    if not ascii_too:
        keep &= cps >= 0x80
    return cps[keep].tobytes().decode("utf-32-le")


def _cps_of(s: str) -> np.ndarray:
    return np.frombuffer(s.encode("utf-32-le"), np.uint32)


class TiktokenOracle:
    family = "tiktoken"

    def __init__(self):
        import tiktoken

        self.tiktoken = tiktoken
        self.version = tiktoken.__version__
        self.engine = f"tiktoken {self.version} (Rust regex crate via fancy-regex)"
        self.ranks = {bytes([b]): b for b in range(256)}

    def probe(self, pat: str, text: str):
        """Normal-form ranges of the code points of ``text`` matched by ``pat``; None if the engine
        rejects the pattern."""
        try:  # runs of matches as one piece: fewer pieces, same code points, ~2x faster
            enc = self.tiktoken.Encoding("probe", pat_str="(?:%s)+" % pat,
                                         mergeable_ranks=self.ranks,
                                         special_tokens={})
        except Exception:  # the engine's compile error
            return None
        out = bytes(enc.encode_ordinary(text)).decode("utf-8")
        return store.from_code_points(_cps_of(out))


class HFOracle:
    family = "hf"

    def __init__(self):
        import tokenizers
        from tokenizers import Regex, pre_tokenizers

        self.tokenizers = tokenizers
        self.version = tokenizers.__version__
        self.engine = f"tokenizers {self.version} (Oniguruma)"
        self._regex, self._pre = Regex, pre_tokenizers

    def probe(self, pat: str, text: str):
        try:
            split = self._pre.Split(self._regex("(?:%s)+" % pat), "removed", invert=True)
        except Exception:
            return None
        got = "".join(p for p, _ in split.pre_tokenize_str(text))
        return store.from_code_points(_cps_of(got))


def _same(a, b) -> bool:
    return a is not None and b is not None and a.shape == b.shape and bool((a == b).all())


def _has_surrogates(r) -> bool:
    return bool(len(store.intersect(r, SURROGATES)))


def _spell(atom: str, negated: bool = False) -> str:
    if atom in ESCAPES:
        return atom.upper() if negated else atom
    return ("\\P{%s}" if negated else "\\p{%s}") % atom


def _detect(markers, known) -> str:
    """Newest version whose marker is known; every older marker must be known and no newer."""
    flags = [bool(known(m)) for m in markers]
    n = flags.index(False) if False in flags else len(flags)
    if n == 0:
        raise RuntimeError("not even the oldest version marker is known; the probe is broken")
    if any(flags[n:]):
        later = [m[0] for m, f in zip(markers[n:], flags[n:]) if f]
        raise RuntimeError(f"version markers out of order: {markers[n - 1][0]} is the newest "
                           f"contiguous one, but {later} are known too; fix catalog.py")
    return markers[n - 1][0]


def build_regex_family(oracle, log) -> tuple:
    """(meta, ranges tables, raw tables) for one regex engine."""
    text = _all_text()
    ranges, meta = {}, {"family": oracle.family, "engine": oracle.engine, "format": FORMAT}
    for atom in ATOMS:
        r = oracle.probe(_spell(atom), text)
        if r is None:
            log(f"  {oracle.family}: engine rejects {_spell(atom)}; atom not shipped")
            continue
        ranges[atom] = r
    aliases = {}
    for atom, names in ALIASES.items():
        if atom not in ranges:
            continue
        for name in (atom,) + names:
            if _same(oracle.probe("\\p{%s}" % name, text), ranges[atom]):
                aliases[loose(name)] = atom
    meta["aliases"] = aliases
    # spellings beyond a bare name: "Is" prefix, key=value forms (Rust accepts them, Oniguruma not)
    meta["is_prefix"] = all(_same(oracle.probe("\\p{Is%s}" % a, text), ranges[a])
                            for a in ("L", "Han"))
    keys = {}
    for key, example in (("gc", "Lu"), ("generalcategory", "Lu"), ("sc", "Greek"),
                         ("script", "Greek")):
        if _same(oracle.probe("\\p{%s=%s}" % (key, example), text), ranges[example]):
            keys[key] = "gc" if example == "Lu" else "sc"
    meta["keys"] = keys
    # other contexts (negated, inside brackets, under (?i)); stored only where the engine
    # differs from the fallback sets.variant() would use. Oniguruma never folds an item inside
    # brackets (it folds the finished class), so that context is not probed there.
    contexts = [(n, f, c) for f in (False, True) for c in (False, True) for n in (False, True)
                if (n, f, c) != (False, False, False) and not (f and c and oracle.family == "hf")]
    for atom in [a for a in ATOMS if a in ranges]:
        for neg, folded, in_class in contexts:
            pat = _spell(atom, negated=neg)
            pat = "[%s]" % pat if in_class else pat
            pat = "(?i:%s)" % pat if folded else pat
            got = oracle.probe(pat, text)
            fallback = variant(ranges, oracle.family, atom, negated=neg, folded=folded,
                               in_class=in_class)
            if not _same(got, store.difference(fallback, SURROGATES)):
                if _has_surrogates(fallback):
                    got = store.union(got, SURROGATES)  # keep the "spans the gap" marker
                ranges[variant_key(atom, negated=neg, folded=folded, in_class=in_class)] = got
    for ch in "abcdefghijklmnopqrstuvwxyz":
        lo, up = oracle.probe("(?i:%s)" % ch, text), oracle.probe("(?i:%s)" % ch.upper(), text)
        if not _same(lo, up):
            raise RuntimeError(f"{oracle.family}: (?i:{ch}) and (?i:{ch.upper()}) differ")
        ranges["(?i)" + ch] = lo
    others = "".join(chr(c) for c in range(128) if not chr(c).isalpha())
    cls = "[" + "".join("\\x%02x" % ord(c) for c in others) + "]"
    if not _same(oracle.probe("(?i:%s)" % cls, text), store.from_code_points(_cps_of(others))):
        raise RuntimeError(f"{oracle.family}: an ASCII non-letter has case variants; "
                           "pattern.py assumes none")
    oracle.cn = ranges["Cn"]
    keys, nxt, orbit = _fold_orbits(oracle, log)
    for ch in "abcdefghijklmnopqrstuvwxyz":
        if store.to_code_points(ranges["(?i)" + ch]).tolist() != list(orbit[ord(ch)]):
            raise RuntimeError(f"{oracle.family}: (?i:{ch}) disagrees with its orbit probe")
    ranges["(?i)multi"], meta["multifold"] = _multifold(oracle, orbit, log)
    cn = store.member_mask(ranges["Cn"])
    meta["unicode"] = _detect(REGEX_MARKERS, lambda m: not cn[m[1]])
    meta["atoms"] = sorted(ranges)
    return meta, ranges, {"fold_keys": keys, "fold_next": nxt}


def _hex_lit(cp: int) -> str:
    return "\\x{%X}" % cp  # both engines read \x{...}


def _fold_orbits(oracle, log) -> tuple:
    """Single-character case folding as the engine applies it to a literal under (?i).

    Candidates are the characters that change under some case mapping in the ``regex``
    module's tables (Changes_When_Casemapped / Changes_When_Casefolded), which must be at least
    as new as the oracle's: case folding is stable, so every oracle orbit is among them. Each
    candidate's orbit is probed; the rest are checked caseless with one class probe.
    Returns (keys, next) with the orbit members chained in a cycle."""
    import regex

    rx_cn = lambda m: regex.match(r"\p{Cn}", chr(m[1])) is None  # noqa: E731
    rx_version = _detect(REGEX_MARKERS, rx_cn)
    cn = store.member_mask(oracle.cn)
    if any(rx_cn(m) < (not cn[m[1]]) for m in REGEX_MARKERS):
        raise RuntimeError(f"the installed regex module (Unicode {rx_version}) is older than "
                           f"the {oracle.family} oracle; upgrade it to generate")
    cands = sorted(set(map(ord, regex.findall(r"[\p{CWCM}\p{CWCF}]", _all_text()))))
    # separated: Oniguruma would otherwise match (?i:U+FB05) against an adjacent "st"
    text = "\x00".join(map(chr, cands))
    orbit = {}
    for cp in cands:
        got = store.to_code_points(oracle.probe("(?i:%s)" % _hex_lit(cp), text)).tolist()
        if cp not in got:
            raise RuntimeError(f"{oracle.family}: (?i:U+{cp:04X}) does not match itself")
        orbit[cp] = tuple(got)
    for cp, members in orbit.items():
        if any(orbit[m] != members for m in members):
            raise RuntimeError(f"{oracle.family}: case folding of U+{cp:04X} is not an "
                               "equivalence; a cycle table cannot hold it")
    rest = store.complement(store.from_code_points(cands))
    rest = store.difference(rest, SURROGATES)
    cls = "[" + "".join(_hex_lit(a) if a == b else _hex_lit(a) + "-" + _hex_lit(b)
                        for a, b in rest.tolist()) + "]"
    if not _same(oracle.probe("(?i:%s)" % cls, _all_text()), rest):
        raise RuntimeError(f"{oracle.family}: a character outside the candidates has case "
                           "variants; widen the candidate set")
    keys, nxt = [], []
    for cp, members in sorted(orbit.items()):
        if len(members) > 1:
            keys.append(cp)
            nxt.append(members[(members.index(cp) + 1) % len(members)])
    n_orbits = len({orbit[k] for k in keys})
    log(f"  {oracle.family}: {len(keys)} characters in {n_orbits} case-fold orbits")
    return keys, nxt, orbit


def _multifold(oracle, orbit, log) -> tuple:
    """Characters that (?i) lets match a string of several characters, and those strings.

    Oniguruma applies full case folding: ``(?i:ss)`` matches U+00DF and ``(?i:\u00df)`` matches
    "ss"; the Rust crate uses simple folding only (both lists empty). Candidates: characters
    whose full case folding (Python's ``str.casefold``) is several characters; then an
    exhaustive probe of every two-letter ASCII string checks nothing was missed there."""
    multi, targets = [], set()
    for c in map(chr, range(0x80, 0x110000)):
        t = c.casefold() if not 0xD800 <= ord(c) <= 0xDFFF else c
        if len(t) < 2:
            continue
        probe = t + "|" + t.upper() + "|" + c
        got = set(store.to_code_points(oracle.probe("(?i:%s)" % _hex_lit(ord(c)), probe)).tolist())
        if got - set(orbit.get(ord(c), (ord(c),))):
            multi.append(ord(c))
            back = oracle.probe("(?i:%s)" % "".join(_hex_lit(ord(x)) for x in t), c)
            if not len(back):
                raise RuntimeError(f"{oracle.family}: U+{ord(c):04X} matches {t!r} but not "
                                   "the reverse")
            targets.add(t)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pairs = "|".join(a + b for a in letters for b in letters)
    hits = oracle.probe("(?i:%s)" % pairs, _all_text(ascii_too=False))
    missed = set(store.to_code_points(hits).tolist()) - set(multi)
    if missed:
        raise RuntimeError(f"{oracle.family}: {sorted(missed)} match two ASCII letters under "
                           "(?i) but were not found as multi-character folds")
    log(f"  {oracle.family}: {len(multi)} characters with multi-character (?i) folds")
    return store.from_code_points(multi), sorted(targets)


# ----------------------------------------------------------------------------------------------
# HF normalisers
# ----------------------------------------------------------------------------------------------

def _per_char(fn, cps: np.ndarray) -> list:
    """fn applied to each code point separately, in one call: chars joined by U+0000."""
    joined = "\x00".join(map(chr, cps.tolist()))
    parts = fn(joined).split("\x00")
    if len(parts) != len(cps):
        raise RuntimeError("U+0000 separator did not survive normalisation")
    return parts


def _hangul(cp: int) -> str:
    i = cp - 0xAC00
    t = chr(0x11A7 + i % 28) if i % 28 else ""
    return chr(0x1100 + i // 588) + chr(0x1161 + (i % 588) // 28) + t


def _mapping_tables(prefix: str, cps: np.ndarray, outs: list, hangul: bool = False) -> dict:
    """Changed code points as keys / offsets / values; Hangul syllables are left to arithmetic
    (``hangul``: checked to decompose exactly so, then not stored)."""
    keys, offs, vals = [], [0], []
    for cp, out in zip(cps.tolist(), outs):
        if hangul and 0xAC00 <= cp <= 0xD7A3:
            if out != _hangul(cp):
                raise RuntimeError(f"HF decomposes Hangul U+{cp:04X} as {out!r}")
            continue
        if out != chr(cp):
            keys.append(cp)
            vals.extend(map(ord, out))
            offs.append(len(vals))
    return {prefix + "_keys": keys, prefix + "_offsets": offs, prefix + "_values": vals}


def build_normalizer(log) -> tuple:
    from tokenizers import normalizers as N

    cps = np.arange(1, 0x110000, dtype=np.uint32)
    cps = cps[(cps < 0xD800) | (cps > 0xDFFF)]
    nfd = _per_char(N.NFD().normalize_str, cps)
    nfkd = _per_char(N.NFKD().normalize_str, cps)
    lower = _per_char(N.Lowercase().normalize_str, cps)
    raw = {}
    raw.update(_mapping_tables("nfd", cps, nfd, hangul=True))
    raw.update(_mapping_tables("nfkd", cps, nfkd, hangul=True))
    raw.update(_mapping_tables("lower", cps, lower))
    nfd_of = dict(zip(raw["nfd_keys"], (nfd[i] for i in np.searchsorted(cps, raw["nfd_keys"]))))

    # Combining classes. HF's tables cannot be read, only observed: a mark m is a non-starter
    # there iff NFD(U+0345 m) puts m (decomposed) first (U+0345 has the top class, 240). The
    # class values come from Python's unicodedata (classes never change once assigned, and
    # every mark HF knows is older than Python's data: checked below).
    marks = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF
             and 0 < unicodedata.combining(chr(c)) < 240]
    probe = N.NFD().normalize_str("\x00".join("\u0345" + chr(m) for m in marks)).split("\x00")
    ccc = {}
    for m, out in zip(marks, probe):
        if out == nfd_of.get(m, chr(m)) + "\u0345":
            ccc[m] = unicodedata.combining(chr(m))
    if N.NFD().normalize_str("\u0345\u0301") == "\u0301\u0345":
        ccc[0x0345] = 240
    # Every HF non-starter must be one Python knows: a mark unknown to Python (too old a Python)
    # would be reordered by HF after U+0345 only if HF gives it a class; scan for that too.
    unknown = [c for c in range(0x300, 0x110000) if not 0xD800 <= c <= 0xDFFF
               and unicodedata.category(chr(c)) == "Cn"]
    probe = N.NFD().normalize_str("\x00".join("\u0345" + chr(m) for m in unknown)).split("\x00")
    bad = [m for m, out in zip(unknown, probe) if out != "\u0345" + chr(m)]
    if bad:
        raise RuntimeError(f"HF knows marks that this Python's unicodedata "
                           f"({unicodedata.unidata_version}) does not: {bad[:5]}...; "
                           "run the generator under a newer Python")
    keys = sorted(ccc)
    ccc_ranges = []  # (start, end, class) runs of equal class over consecutive code points
    for cp in keys:
        if ccc_ranges and ccc_ranges[-1][1] == cp - 1 and ccc_ranges[-1][2] == ccc[cp]:
            ccc_ranges[-1][1] = cp
        else:
            ccc_ranges.append([cp, cp, ccc[cp]])
    raw["ccc"] = [x for r in ccc_ranges for x in r]

    # Composition pairs: the canonical one-step mapping (a, b) -> c of every character HF
    # decomposes, kept where HF's NFC of "a b" gives c back (exclusions and non-starter
    # decompositions do not).
    cand = []
    for c in raw["nfd_keys"]:
        d = unicodedata.decomposition(chr(c))
        if d and not d.startswith("<") and len(d.split()) == 2:
            a, b = (int(x, 16) for x in d.split())
            cand.append((a, b, c))
    outs = N.NFC().normalize_str("\x00".join(chr(a) + chr(b) for a, b, _ in cand)).split("\x00")
    pairs = sorted((a, b, c) for (a, b, c), out in zip(cand, outs) if out == chr(c))
    raw["compose"] = [x for p in pairs for x in p]

    lower_of = dict(zip(raw["lower_keys"], (lower[i] for i in
                                            np.searchsorted(cps, raw["lower_keys"]))))
    meta = {
        "family": "hf", "engine": f"tokenizers {_tokenizers_version()} "
        "(unicode-normalization-alignments; Rust char::to_lowercase)", "format": FORMAT,
        "normalize_unicode": _detect(CCC_MARKERS, lambda m: m[1] in ccc),
        "lowercase_unicode": _detect(LOWERCASE_MARKERS,
                                     lambda m: lower_of.get(m[1]) == chr(m[2])),
        "python_unicodedata": unicodedata.unidata_version,
    }
    log(f"  hf normaliser: {len(keys)} non-starters, {len(raw['nfd_keys'])} canonical and "
        f"{len(raw['nfkd_keys'])} compatibility decompositions, {len(pairs)} composition pairs, "
        f"{len(raw['lower_keys'])} lower-case mappings")
    return meta, raw


def _tokenizers_version() -> str:
    import tokenizers

    return tokenizers.__version__


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gputok.unicode.generate", description=__doc__
                                 .split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data",
                    help="directory for the .ucd files (default: the package's data/)")
    ap.add_argument("--only", choices=["tiktoken", "hf", "hf_norm", "hf_bert"], action="append",
                    help="regenerate only these files (repeatable)")
    args = ap.parse_args(argv)
    only = set(args.only or ["tiktoken", "hf", "hf_norm", "hf_bert"])

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    for name in ("tiktoken", "hf"):
        if name in only:
            t = time.perf_counter()
            oracle = TiktokenOracle() if name == "tiktoken" else HFOracle()
            meta, ranges, raw = build_regex_family(oracle, log)
            size = store.write(args.out / f"{name}.ucd", meta, ranges, raw)
            log(f"{name}.ucd: Unicode {meta['unicode']}, {len(ranges)} sets, {size} bytes "
                f"({time.perf_counter() - t:.1f} s)")
    if "hf_norm" in only:
        t = time.perf_counter()
        meta, raw = build_normalizer(log)
        size = store.write(args.out / "hf_norm.ucd", meta, {}, raw)
        log(f"hf_norm.ucd: normalisation Unicode {meta['normalize_unicode']}, lower-case Unicode "
            f"{meta['lowercase_unicode']}, {size} bytes ({time.perf_counter() - t:.1f} s)")
    if "hf_bert" in only:  # after hf_norm: its mappings are checked against the BERT normaliser
        from . import bert

        t = time.perf_counter()
        meta, raw = bert.build(log)
        size = store.write(args.out / "hf_bert.ucd", meta, {}, raw)
        log(f"hf_bert.ucd: {size} bytes ({time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
