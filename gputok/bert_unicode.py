"""The Unicode data of HF's ``BertNormalizer`` and ``BertPreTokenizer``, pinned for gputok.

HF ``tokenizers`` 0.23 takes each property from a different table (``cpu_ref/wordpiece.py``
lists them): ``is_control`` for clean_text and ``is_punctuation`` from an old Unicode,
``is_mark_nonspacing`` (strip_accents) from another, NFD from an old normalisation crate,
``to_lowercase`` from Rust's std (Unicode 16). Against Python 3.11's ``unicodedata`` that is
13 (clean_text) / 386 (strip_accents) / 55 (lowercase) / 106 (punctuation) code points, so
gputok never asks ``unicodedata``: the tables in ``data/bert_unicode.bin`` were measured
through HF itself, one code point at a time (``python -m gputok.bert_unicode generate``; needs
``tokenizers``, ~15 s), and the runtime reads only that file (numpy + zlib).

* ``flags``: per code point, ``DROP`` / ``SPACE`` (clean_text removes it / makes it " "),
  ``CJK`` (handle_chinese_chars pads it with spaces), ``PUNCT`` and ``WS`` (BertPreTokenizer
  makes it a word of its own / splits there), ``MN`` (strip_accents removes it after NFD),
  ``DECOMP`` (NFD changes it), ``LOWER`` (lowercase changes it);
* ``nfd``: HF's NFD of each code point that has one; ``ccc``: HF's canonical combining class
  (probed by the order HF's NFD puts a mark in next to reference marks);
* ``lower``: HF's per-character lowercase (full mappings: U+0130 -> "i\\u0307").

When ``gputok.unicode`` (the pinned oracle data of every family) lands, these tables move into
its generator and data; ``tables()`` is the one interface the normaliser uses.
"""

from __future__ import annotations

import functools
import json
import sys
import zlib
from pathlib import Path

import numpy as np

DROP, SPACE, CJK, PUNCT, WS, MN, DECOMP, LOWER = 1, 2, 4, 8, 16, 32, 64, 128
_MAGIC = b"GPUTOK-BERT-UNICODE 1\n"
N_CP = 0x110000


def data_path() -> Path:
    return Path(__file__).resolve().parent / "data" / "bert_unicode.bin"


class BertTables:
    """The decoded tables (see the module docstring); built once per process (~20 ms)."""

    def __init__(self, arrays: dict, meta: dict):
        self.meta = meta
        flags = np.zeros(N_CP, np.uint8)
        for a, b, f in arrays["runs"].reshape(-1, 3).tolist():
            flags[a:b] = f
        self.flags = flags
        self.nfd = _mapping(arrays, "nfd")
        self.lower = _mapping(arrays, "lower")
        self.ccc = dict(zip(arrays["ccc_keys"].tolist(), arrays["ccc_vals"].tolist()))
        self.ccc_table = np.zeros(N_CP, np.uint8)
        self.ccc_table[arrays["ccc_keys"].astype(np.int64)] = arrays["ccc_vals"]
        self.nfd_keys = arrays["nfd_keys"]
        self.nfd_off = arrays["nfd_off"]
        self.nfd_vals = arrays["nfd_vals"]
        # single-character lowercase as a gather table; multi-character ones are the exceptions
        self.lower1 = np.arange(N_CP, dtype=np.uint32)
        multi = []
        for k, v in self.lower.items():
            if len(v) == 1:
                self.lower1[k] = ord(v)
            else:
                multi.append(k)
        self.lower_multi_arr = np.array(sorted(multi), np.uint32)


def _mapping(arrays: dict, name: str) -> dict:
    keys = arrays[name + "_keys"].tolist()
    off = arrays[name + "_off"].tolist()
    vals = "".join(map(chr, arrays[name + "_vals"].tolist()))
    return {k: vals[off[i]:off[i + 1]] for i, k in enumerate(keys)}


@functools.lru_cache(maxsize=1)
def tables() -> BertTables:
    """The pinned tables (read once)."""
    arrays, meta = read(data_path())
    return BertTables(arrays, meta)


# ---- file format: magic, one JSON line (names, dtypes, lengths, meta), zlib(array bytes) -----

def write(path: Path, arrays: dict, meta: dict) -> None:
    names = sorted(arrays)
    head = {"arrays": [[n, str(arrays[n].dtype), int(arrays[n].size)] for n in names],
            "meta": meta}
    body = b"".join(np.ascontiguousarray(arrays[n]).tobytes() for n in names)
    path.write_bytes(_MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n"
                     + zlib.compress(body, 9))


def read(path: Path) -> tuple[dict, dict]:
    raw = path.read_bytes()
    if not raw.startswith(_MAGIC):
        raise ValueError(f"{path}: not a gputok BERT Unicode table (reinstall gputok)")
    nl = raw.index(b"\n", len(_MAGIC))
    head = json.loads(raw[len(_MAGIC):nl])
    body = zlib.decompress(raw[nl + 1:])
    out, pos = {}, 0
    for name, dtype, size in head["arrays"]:
        dt = np.dtype(dtype)
        out[name] = np.frombuffer(body, dt, size, pos).copy()
        pos += dt.itemsize * size
    return out, head["meta"]


# ---- the generator (probes HF; never imported at run time) ---------------------------------

def _probe_all(fn, cps) -> list:
    return [fn(chr(c)) for c in cps]


def generate(path: "Path | None" = None) -> dict:
    """Measure every table through HF ``tokenizers`` and write ``data/bert_unicode.bin``."""
    import tokenizers
    from tokenizers import normalizers, pre_tokenizers

    cps = [c for c in range(N_CP) if not 0xD800 <= c <= 0xDFFF]

    def bert(**kw):
        base = dict(clean_text=False, handle_chinese_chars=False, strip_accents=False,
                    lowercase=False)
        base.update(kw)
        return normalizers.BertNormalizer(**base).normalize_str

    flags = np.zeros(N_CP, np.uint8)
    clean = bert(clean_text=True)
    cjk = bert(handle_chinese_chars=True)
    strip = bert(strip_accents=True)
    lower = bert(lowercase=True)
    nfd = normalizers.NFD().normalize_str
    pre = pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    nfd_map, lower_map, strip_map = {}, {}, {}
    for c in cps:
        ch = chr(c)
        r = clean(ch)
        if r == "":
            flags[c] |= DROP
        elif r == " " and ch != " ":
            flags[c] |= SPACE
        if cjk(ch) == f" {ch} ":
            flags[c] |= CJK
        words = pre("a" + ch + "a")
        if len(words) == 3:
            flags[c] |= PUNCT
        elif len(words) == 2:
            flags[c] |= WS
        d = nfd(ch)
        if d != ch:
            nfd_map[c] = d
        s = strip(ch)
        if s != ch:
            strip_map[c] = s
        lo = lower(ch)
        if lo != ch:
            lower_map[c] = lo
    # Mn (removed after NFD): a character NFD leaves alone that strip_accents removes
    for c, s in strip_map.items():
        if s == "" and c not in nfd_map:
            flags[c] |= MN
    ccc = _probe_ccc(nfd, flags, nfd_map)
    for c in nfd_map:
        flags[c] |= DECOMP
    for c in lower_map:
        flags[c] |= LOWER
    # self-check: per character, NFD + canonical order + drop MN == HF's strip_accents
    t = BertTables(_arrays(flags, nfd_map, lower_map, ccc), {})
    from .stages.bert import strip_accents_text

    bad = [c for c in cps if strip_accents_text(chr(c), t) != strip_map.get(c, chr(c))]
    if bad:
        raise RuntimeError(f"strip_accents self-check failed on {len(bad)} code points "
                           f"(first U+{bad[0]:04X})")
    meta = {"tokenizers": tokenizers.__version__, "python": sys.version.split()[0],
            "counts": {"drop": int(np.count_nonzero(flags & DROP)),
                       "space": int(np.count_nonzero(flags & SPACE)),
                       "cjk": int(np.count_nonzero(flags & CJK)),
                       "punct": int(np.count_nonzero(flags & PUNCT)),
                       "ws": int(np.count_nonzero(flags & WS)),
                       "mn": int(np.count_nonzero(flags & MN)),
                       "nfd": len(nfd_map), "ccc": len(ccc), "lower": len(lower_map)}}
    write(path or data_path(), _arrays(flags, nfd_map, lower_map, ccc), meta)
    return meta


def _probe_ccc(nfd, flags, nfd_map) -> dict:
    """HF's combining class of every character that may be a non-starter: where HF's NFD puts
    it next to reference marks of each class (a stable sort by class: "a" + x + r becomes
    "a" + r + x exactly when class(x) > class(r) > 0)."""
    import unicodedata

    # one reference mark per class: the first one HF agrees is a mark (it moves after U+0334,
    # class 1, in HF's NFD; U+0334 itself moves before U+0300, class 230)
    one = "\u0334"
    assert nfd("a\u0300" + one) == "a" + one + "\u0300", "HF's NFD does not reorder marks?"
    refs: dict = {1: one}
    for c in range(0x300, 0x20000):
        ch = chr(c)
        v = unicodedata.combining(ch)
        if v > 1 and v not in refs and nfd(ch) == ch and nfd("a" + ch + one) == "a" + one + ch:
            refs[v] = ch
    values = sorted(refs)
    cand = set()
    for c in range(N_CP):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Mc", "Me") \
                or flags[c] & MN:
            cand.add(c)
    for d in nfd_map.values():
        cand.update(ord(x) for x in d)
    out = {}
    for c in sorted(cand):
        if 0xD800 <= c <= 0xDFFF or c in nfd_map:
            continue
        ch = chr(c)
        vs = [v for v in values if refs[v] != ch]
        above = [v for v in vs if nfd("a" + ch + refs[v]) == "a" + refs[v] + ch]
        below = [v for v in vs if nfd("a" + refs[v] + ch) == "a" + ch + refs[v]]
        if not above and not below:
            continue  # a starter (class 0): nothing moves past it
        # class(x) is above every reference it moves past and below every one that moves past
        # it; equal classes never move, so it is the one reference value left in between
        lo, hi = max(above, default=0), min(below, default=256)
        between = [v for v in values if lo < v < hi]
        if len(between) > 1 and ch in refs.values():
            between = [v for v in between if refs[v] == ch]
        if len(between) != 1:
            raise RuntimeError(f"cannot place U+{c:04X}: above {above}, below {below}")
        out[c] = between[0]
    return out


def _arrays(flags, nfd_map, lower_map, ccc) -> dict:
    runs = []
    start = 0
    for c in range(1, N_CP + 1):
        if c == N_CP or flags[c] != flags[start]:
            if flags[start]:
                runs.append((start, c, int(flags[start])))
            start = c
    out = {"runs": np.array(runs, np.int64).reshape(-1)}
    for name, m in (("nfd", nfd_map), ("lower", lower_map)):
        keys = sorted(m)
        off = np.zeros(len(keys) + 1, np.int64)
        np.cumsum([len(m[k]) for k in keys], out=off[1:])
        out[name + "_keys"] = np.array(keys, np.uint32)
        out[name + "_off"] = off
        out[name + "_vals"] = np.array([ord(x) for k in keys for x in m[k]], np.uint32)
    keys = sorted(ccc)
    out["ccc_keys"] = np.array(keys, np.uint32)
    out["ccc_vals"] = np.array([ccc[k] for k in keys], np.uint8)
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["generate"]:
        sys.exit("usage: python -m gputok.bert_unicode generate")
    print(json.dumps(generate(), indent=1))
