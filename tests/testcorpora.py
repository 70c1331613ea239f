"""The text corpora the tests and benchmarks use: prose, code, multilingual and emoji text,
built from pinned sources (see ``testdata.py``) and files every Debian CPython machine has.

``corpus(kind, max_mb)`` is deterministic: the same documents in the same order on every
machine with the same cache. Standalone like ``testdata`` (never imports gputok).
"""

from __future__ import annotations

import bz2
import functools
import gettext
import gzip
import hashlib
import json
import os
import re
import sysconfig
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator


from testdata import CORPUS_MB_ENV, DEFAULT_CORPUS_MB, KINDS, _is_cached, _try_ensure, ensure

# --------------------------------------------------------------------------
# Corpora
# --------------------------------------------------------------------------


def _corpus_cap_bytes() -> int | None:
    raw = os.environ.get(CORPUS_MB_ENV, "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_CORPUS_MB
    except ValueError:
        raise ValueError(f"{CORPUS_MB_ENV} must be a number of MB, got {raw!r}") from None
    return None if mb <= 0 or mb == float("inf") else int(mb * 1_000_000)


def _stable_order(paths: Iterable[Path], root: Path) -> list[Path]:
    """Deterministic, well-mixed order: sort by a hash of the relative path.

    Plain sorting would fill a small cap with one corner of a tree (all of
    asyncio, all of man1/a*).  Hashing the path keeps each file's position
    independent of which other files a machine happens to have.
    """
    return sorted(paths, key=lambda p: hashlib.sha1(
        p.relative_to(root).as_posix().encode()).hexdigest())


def _read_text(path: Path, fallback: str | None = None) -> str | None:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode(fallback) if fallback else None


def _interleave(sources: list[Iterator[str]], cap: int | None) -> list[str]:
    """Merge document streams, always drawing from the least-served stream.

    So a capped corpus holds some of every source (and, for multilingual, of
    every language in priority order) instead of the first source alone.
    Documents are taken until the total UTF-8 size reaches ``cap``; the last
    one may overshoot it.
    """
    served = [0] * len(sources)
    live = list(range(len(sources)))
    docs: list[str] = []
    total = 0
    while live and (cap is None or total < cap):
        i = min(live, key=lambda k: (served[k], k))
        doc = next(sources[i], None)
        if doc is None:
            live.remove(i)
            continue
        if not doc.strip():
            continue
        try:
            n = len(doc.encode("utf-8"))  # rejects lone surrogates
        except UnicodeEncodeError:
            continue
        docs.append(doc)
        served[i] += n
        total += n
    return docs


# ---- prose ---------------------------------------------------------------


def _wiki_articles() -> Iterator[str]:
    path = ensure("gensim") / "enwiki.xml.bz2"
    title = ns = text = None
    redirect = False
    with bz2.open(path) as f:
        for _, el in ET.iterparse(f):
            tag = el.tag.rsplit("}", 1)[-1]
            if tag == "title":
                title = el.text
            elif tag == "ns":
                ns = el.text
            elif tag == "redirect":
                redirect = True
            elif tag == "text":
                text = el.text
            elif tag == "page":
                if ns == "0" and not redirect and text:
                    # Wiki markup is kept: templates, tables and links are
                    # exactly the punctuation-heavy text tokenizers see.
                    yield f"{title}\n\n{text}"
                title = ns = text = None
                redirect = False
                el.clear()


def _lee_background() -> Iterator[str]:
    # One news story per line; ten stories make one document of a few KB.
    lines = (ensure("gensim") / "lee_background.cor").read_text("utf-8").splitlines()
    lines = [line for line in lines if line.strip()]
    for i in range(0, len(lines), 10):
        yield "\n".join(lines[i:i + 10]) + "\n"


def _pydoc_topics() -> Iterator[str]:
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return
    for key in sorted(topics):
        yield topics[key]


_ROFF_GLYPHS = {
    "em": "\u2014", "en": "\u2013", "hy": "-", "aq": "'", "dq": '"', "lq": "\u201c",
    "rq": "\u201d", "oq": "\u2018", "cq": "\u2019", "bu": "\u2022", "co": "\u00a9",
    "rg": "\u00ae", "tm": "\u2122", "mu": "\u00d7", "di": "\u00f7", "+-": "\u00b1",
    "->": "\u2192", "<-": "\u2190", "<=": "\u2264", ">=": "\u2265", "!=": "\u2260",
    "de": "\u00b0", "ga": "`", "ha": "^", "ti": "~", "rs": "\\", "sl": "/",
    "la": "\u27e8", "ra": "\u27e9", "Fo": "\u00ab", "Fc": "\u00bb", "ss": "\u00df",
}
_ROFF_ESCAPE = re.compile(
    r"""\\(?:
        \"(?P<comment>.*)                      # comment to end of line
      | \((?P<g2>..)                           # \(xx glyph
      | \[(?P<gl>[^\]]*)\]                     # \[name] glyph
      | \*(?:\(..|\[[^\]]*\]|.)                # string interpolation
      | [fFnmMgk](?:\(..|\[[^\]]*\]|.)         # font, colour, register
      | s[-+]?(?:\d+|\(\d\d|\[\d+\])           # size change
      | [hvwlLDoxbXNkmMYzVZ]'[^']*'            # escapes with a quoted argument
      | (?P<lit>[-e\\.'`])                     # literal characters
      | [&,/|^:%c}{0~ ]                        # zero-width and spacing
    )""", re.VERBOSE)
_ROFF_TEXT_MACROS = {
    "SH", "SS", "B", "I", "BI", "IB", "BR", "RB", "IR", "RI", "SM", "SB", "IP", "UR",
    "MT", "OP", "SY", "Nm", "Nd", "Ar", "Fl", "Op", "Xr", "Pa", "Sh", "Ss", "It",
    "Em", "Sy", "Dq", "Qq", "Ql", "Li", "Cm", "Ic", "Ev", "Va", "Fn", "Fa", "Ft",
    "Dv", "Er", "Ev", "Ad", "An", "Lk", "Mt", "Tn", "Ux", "St", "Bx", "Ox", "Nx",
}
_ROFF_BREAK_MACROS = {"PP", "P", "LP", "TP", "sp", "br", "Pp", "Bl", "El", "RS", "RE"}


def _roff_to_text(src: str) -> str:
    """Very light roff-to-text: keep the words, drop the requests.

    Not a renderer (no groff on minimal machines); good enough that the
    result reads as English prose with man-page punctuation.
    """
    def escape(m: re.Match) -> str:
        if m.group("comment") is not None:
            return ""
        glyph = m.group("g2") or m.group("gl")
        if glyph is not None:
            if re.fullmatch(r"u[0-9A-F]{4,6}", glyph):  # \[u00E9]
                return chr(int(glyph[1:], 16))
            return _ROFF_GLYPHS.get(glyph, "")
        lit = m.group("lit")
        if lit is not None:
            return "\\" if lit == "e" else lit
        return " " if m.group(0) in ("\\ ", "\\~", "\\0") else ""

    out: list[str] = []
    in_def = False
    for line in src.splitlines():
        if in_def:
            in_def = line.strip() != ".."
            continue
        if line[:1] in (".", "'"):
            m = re.match(r"[.']\s*(\S+)\s*(.*)", line)
            if not m:
                continue
            name, args = m.groups()
            if name in ("de", "de1", "am", "ig"):
                in_def = True
            elif name in _ROFF_TEXT_MACROS:
                if args:
                    out.append(_ROFF_ESCAPE.sub(escape, args.replace('"', "")).strip())
                if name in ("SH", "SS", "Sh", "Ss"):
                    out.append("")
            elif name in _ROFF_BREAK_MACROS:
                out.append("")
            continue  # every other request or macro carries no prose
        out.append(_ROFF_ESCAPE.sub(escape, line))
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def _man_pages(root: Path = Path("/usr/share/man"), langs: tuple[str, ...] = ("",)) -> Iterator[str]:
    seen: set[str] = set()
    for lang in langs:
        base = root / lang if lang else root
        if not base.is_dir():
            continue
        # The Cloud SDK, where installed, adds ~16k near-identical generated
        # gcloud pages that would otherwise crowd out every other page.
        files = [p for p in base.glob("man*/*")
                 if p.is_file() and not p.name.startswith("gcloud")]
        for p in _stable_order(files, base):
            real = os.path.realpath(p)
            if real in seen:  # symlinked aliases of one page
                continue
            seen.add(real)
            try:
                raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
            except (OSError, EOFError, zlib.error):
                continue
            try:
                src = raw.decode("utf-8")
            except UnicodeDecodeError:
                src = raw.decode("latin-1")  # older pages still ship as Latin-1
            if src.lstrip().startswith(".so "):  # alias page: ".so man1/other.1"
                continue
            text = _roff_to_text(src)
            if len(text) > 200:
                yield text


def _common_licenses() -> Iterator[str]:
    root = Path("/usr/share/common-licenses")
    if not root.is_dir():
        return
    seen: set[str] = set()
    for p in sorted(root.iterdir()):
        real = os.path.realpath(p)
        if p.is_file() and real not in seen:
            seen.add(real)
            text = _read_text(p, "latin-1")
            if text:
                yield text


def _prose(cap: int | None) -> list[str]:
    return _interleave([_wiki_articles(), _lee_background(), _pydoc_topics(),
                        _man_pages(), _common_licenses()], cap)


# ---- code ----------------------------------------------------------------


def _stdlib_py() -> Iterator[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py")
             if "site-packages" not in p.parts and "dist-packages" not in p.parts]
    for p in _stable_order(files, root):
        text = _read_text(p)  # skips the stdlib's deliberately mis-encoded test files
        if text:
            yield text


def _c_headers(root: Path = Path("/usr/include")) -> Iterator[str]:
    if not root.is_dir():
        return
    files = [p for p in root.rglob("*.h") if p.is_file()]
    for p in _stable_order(files, root):
        text = _read_text(p)
        if text:
            yield text


def _code(cap: int | None) -> list[str]:
    return _interleave([_stdlib_py(), _c_headers()], cap)


# ---- multilingual --------------------------------------------------------

# Drawn first, in this order, so even a small cap covers every major script:
# CJK, Cyrillic, Arabic, Hebrew, Indic, Thai, Greek, Georgian, Armenian, ...
_PRIORITY_LANGS = (
    "ja", "zh_CN", "zh_TW", "ko", "ru", "uk", "ar", "fa", "he", "hi", "bn", "ta",
    "th", "el", "ka", "hy", "am", "ml", "te", "mr", "gu", "pa", "kn", "km", "my",
    "si", "ne", "ur", "vi", "tr", "pl", "cs", "de", "fr", "es", "pt_BR", "it",
    "sv", "fi", "hu", "ro", "bg", "sr", "kk", "be", "eo",
)
# Django names Chinese by script.
_LANG_ALIASES = {"zh_Hans": "zh_CN", "zh_Hant": "zh_TW"}


def _mo_text(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            t = gettext.GNUTranslations(f)
    except Exception:  # noqa: BLE001 - some catalogs ship malformed headers; skip them
        return None
    # The public API only looks strings up; the catalog dict is the one way
    # to enumerate them.  Key "" is the PO header (metadata, not translation).
    values = [v for k, v in t._catalog.items() if k != "" and isinstance(v, str)]
    return "\n".join(values) + "\n" if values else None


def _mo_docs(files: list[Path]) -> Iterator[str]:
    for p in files:
        text = _mo_text(p)
        if text:
            yield text


def _cjk_test_files() -> Iterator[str]:
    # Present in CPython builds that keep Lib/test (not Debian's python3 package).
    root = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"
    for p in sorted(root.glob("*-utf8.txt")) if root.is_dir() else ():
        text = _read_text(p)
        if text:
            yield text


def _multilingual(cap: int | None) -> list[str]:
    by_lang: dict[str, list[Iterator[str]]] = {}

    def add(lang: str, it: Iterator[str]) -> None:
        by_lang.setdefault(_LANG_ALIASES.get(lang, lang), []).append(it)

    # A full Debian install has ~200 locales under /usr/share/locale; slim
    # container images may have none, and then the Django catalogs carry it.
    locale_root = Path("/usr/share/locale")
    if locale_root.is_dir():
        for d in sorted(locale_root.iterdir()):
            files = [p for p in (d / "LC_MESSAGES").glob("*.mo") if p.is_file()]
            if files and not d.name.startswith("en"):
                add(d.name, _mo_docs(_stable_order(files, d)))
    # One document per Django app catalog (admin, auth, humanize, ...).
    django = ensure("django")
    dj_by_lang: dict[str, list[Path]] = {}
    for p in django.rglob("LC_MESSAGES/*.mo"):
        dj_by_lang.setdefault(p.parent.parent.name, []).append(p)
    for lang in sorted(dj_by_lang):
        if not lang.startswith("en"):
            add(lang, _mo_docs(_stable_order(dj_by_lang[lang], django)))
    # Translated man pages: real running prose rather than UI strings.
    man_root = Path("/usr/share/man")
    if man_root.is_dir():
        for d in sorted(man_root.iterdir()):
            if not d.name.startswith("man") and d.is_dir():
                add(d.name, _man_pages(man_root, (d.name,)))

    def chain(its: list[Iterator[str]]) -> Iterator[str]:
        # Alternate between a language's sources (gettext catalogs, Django,
        # man pages) rather than exhausting one first.
        its = list(its)
        while its:
            for it in list(its):
                doc = next(it, None)
                if doc is None:
                    its.remove(it)
                else:
                    yield doc

    order = [lang for lang in _PRIORITY_LANGS if lang in by_lang]
    order += sorted(set(by_lang) - set(order))
    return _interleave([_cjk_test_files()] + [chain(by_lang[lang]) for lang in order], cap)


# ---- emoji ---------------------------------------------------------------

_SENTENCES = (
    "I love {e} so much",
    "{e}{e}{e}",
    "Status: {e}!!! ({name})",
    "the {name} emoji is {e}, isn't it?",
    "ok{e}ok {e}123 {e}\n",
    "\u00bb{e}\u00ab \u201c{e}\u201d",
    "  {e}  ",
    "Mixed: caf\u00e9 {e} \u65e5\u672c {e} \u0645\u0631\u062d\u0628\u0627",
)


def _emoji_entries() -> tuple[list[str], list[tuple[str, str]]]:
    """(lines of a test file, [(fully-qualified emoji, name)])."""
    # If an earlier fetch already fell back to the PyPI copy, do not retry apt
    # (and maybe "apt-get update") in every test process.
    fell_back = (_is_cached("emoji-pypi") and not _is_cached("unicode-data"))
    d = None if fell_back else _try_ensure("unicode-data")
    if d is not None:
        lines = (d / "emoji-test.txt").read_text("utf-8").splitlines()
        entries = []
        for line in lines:
            m = re.match(r"^([0-9A-F ]+?)\s*;\s*fully-qualified\s*#\s*\S+\s+E\S+\s+(.*)$", line)
            if m:
                entries.append(("".join(chr(int(c, 16)) for c in m.group(1).split()), m.group(2)))
        return lines, entries
    # Fallback: the emoji package's JSON (status 2 == fully-qualified).
    data = json.loads((ensure("emoji-pypi") / "emoji.json").read_text("utf-8"))
    status = {1: "component", 2: "fully-qualified", 3: "minimally-qualified", 4: "unqualified"}
    lines, entries = [], []
    for e, info in data.items():
        name = info["en"].strip(":").replace("_", " ")
        cps = " ".join(f"{ord(c):04X}" for c in e)
        lines.append(f"{cps:<40}; {status.get(info['status'], '?'):<20}# {e} {name}")
        if info["status"] == 2:
            entries.append((e, name))
    return lines, entries


def _emoji(cap: int | None) -> list[str]:
    lines, entries = _emoji_entries()

    def test_file_chunks() -> Iterator[str]:
        for i in range(0, len(lines), 50):
            yield "\n".join(lines[i:i + 50]) + "\n"

    def sentences() -> Iterator[str]:
        for i in range(0, len(entries), 50):
            chunk = entries[i:i + 50]
            yield " ".join(_SENTENCES[(i + j) % len(_SENTENCES)].format(e=e, name=name)
                           for j, (e, name) in enumerate(chunk))

    return _interleave([test_file_chunks(), sentences()], cap)


# ---- public corpus API ---------------------------------------------------

_BUILDERS: dict[str, Callable[[int | None], list[str]]] = {
    "prose": _prose, "code": _code, "multilingual": _multilingual, "emoji": _emoji,
}


@functools.lru_cache(maxsize=None)
def _corpus_cached(kind: str, cap: int | None) -> tuple[str, ...]:
    return tuple(_BUILDERS[kind](cap))


def corpus(kind: str, max_mb: float | None = None) -> list[str]:
    """Whole documents (one ``str`` each) of real text of one kind.

    kind: "prose", "code", "multilingual" or "emoji".  The order is
    deterministic for a given machine; the size is capped at ``max_mb`` MB of
    UTF-8 (default: ``$GPUTOK_CORPUS_MB``, else 2.0; ``<= 0`` means no cap).
    Results are memoised per process.
    """
    if kind not in _BUILDERS:
        raise KeyError(f"unknown corpus kind {kind!r}; known: {list(KINDS)}")
    if max_mb is None:
        cap = _corpus_cap_bytes()
    else:
        cap = None if max_mb <= 0 else int(max_mb * 1_000_000)
    return list(_corpus_cached(kind, cap))


def corpus_bytes(kind: str, max_mb: float | None = None) -> int:
    """Total UTF-8 size of ``corpus(kind)``."""
    return sum(len(d.encode("utf-8")) for d in corpus(kind, max_mb))


def all_corpora(max_mb: float | None = None) -> dict[str, list[str]]:
    return {kind: corpus(kind, max_mb) for kind in KINDS}


