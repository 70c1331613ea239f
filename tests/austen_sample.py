"""``sample/austen.jsonl`` (build time only): Jane Austen's novels, one JSON record per chapter,
read from the janeaustenr R package's data (pinned in ``testdata.py``).
"""

from __future__ import annotations

import gzip
import json
import re
import struct
import zlib
from pathlib import Path
from typing import Iterator


from testdata import TestDataError, ensure

# --------------------------------------------------------------------------
# sample/austen.jsonl (build time only)
# --------------------------------------------------------------------------


class _RReader:
    """Just enough of R's XDR serialisation format to read character vectors.

    janeaustenr keeps its data as an R lazy-load database: Rdata.rdx is a
    gzip-compressed serialised index (name -> offset/length) into Rdata.rdb,
    whose entries are a 4-byte length plus a zlib stream of one serialised
    object.
    """

    def __init__(self, data: bytes):
        self.data, self.pos, self.refs = data, 0, []

    def _int(self) -> int:
        (v,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return v

    def read(self):
        if self.data[:2] != b"X\n":
            raise TestDataError("not an XDR R serialisation")
        self.pos = 2
        version = self._int()
        self._int(), self._int()  # writer and minimal reader R versions
        if version == 3:
            n = self._int()
            self.pos += n  # skip the native encoding name
        return self._item()

    def _item(self):
        flags = self._int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == 254:  # NILVALUE
            return None
        if kind == 255:  # REFSXP
            return self.refs[(flags >> 8 or self._int()) - 1]
        if kind == 1:  # SYMSXP
            sym = ("sym", self._item())
            self.refs.append(sym)
            return sym
        if kind == 9:  # CHARSXP
            n = self._int()
            if n == -1:
                return None  # NA_character_
            s = self.data[self.pos:self.pos + n]
            self.pos += n
            return s.decode("latin-1" if flags & (1 << 14) else "utf-8")
        if kind == 2:  # LISTSXP (pairlist): attributes use these
            if has_attr:
                self._item()  # a pairlist cell's own attributes: not needed
            tag = self._item() if has_tag else None
            head, tail = self._item(), self._item()
            return [(tag[1] if tag else None, head)] + (tail or [])
        if kind in (10, 13):  # LGLSXP, INTSXP
            n = self._int()
            value = list(struct.unpack_from(f">{n}i", self.data, self.pos))
            self.pos += 4 * n
        elif kind == 14:  # REALSXP
            n = self._int()
            value = list(struct.unpack_from(f">{n}d", self.data, self.pos))
            self.pos += 8 * n
        elif kind in (16, 19):  # STRSXP, VECSXP
            value = [self._item() for _ in range(self._int())]
        else:
            raise TestDataError(f"unsupported R type {kind}")
        if has_attr:
            attrs = dict(self._item())
            if "names" in attrs:
                return dict(zip(attrs["names"], value))
        return value


# janeaustenr's own names, in publication order.
_AUSTEN_TITLES = {
    "sensesensibility": "Sense & Sensibility",
    "prideprejudice": "Pride & Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}


def austen_chapters() -> Iterator[dict]:
    """One record per chapter of Austen's six novels, from r-cran-janeaustenr.

    Chapter 0 is the front matter (title page; Northanger Abbey's advertisement).
    A "VOLUME n" heading goes with the chapter it opens.
    """
    d = ensure("janeaustenr")
    index = _RReader(gzip.decompress((d / "Rdata.rdx").read_bytes())).read()
    rdb = (d / "Rdata.rdb").read_bytes()
    heading = re.compile(r"^\s*chapter\b", re.I)
    volume = re.compile(r"^\s*volume\b", re.I)
    for key, title in _AUSTEN_TITLES.items():
        off, length = index["variables"][key]
        lines = _RReader(zlib.decompress(rdb[off + 4:off + length])).read()
        starts = []
        for i, line in enumerate(lines):
            if heading.match(line):
                j = i - 1
                while j >= 0 and not lines[j].strip():
                    j -= 1
                starts.append(j if j >= 0 and volume.match(lines[j]) else i)
        bounds = [0] + starts + [len(lines)]
        for chapter, (a, b) in enumerate(zip(bounds, bounds[1:])):
            text = "\n".join(lines[a:b]).strip("\n") + "\n"
            yield {"text": text, "title": title, "chapter": chapter}


def build_sample(out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for rec in austen_chapters():
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


