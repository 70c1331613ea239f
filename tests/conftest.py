"""Shared fixtures: oracle tokenizers built offline from pinned files, real corpora, backends.

Test data comes from ``tests/testdata.py`` (pinned registry packages, sha256-checked, cached under
``$GPUTOK_TEST_DATA``). The oracles are the real libraries: tiktoken ``Encoding`` objects built
from the same rank files with the patterns and special tokens that tiktoken's own
``tiktoken_ext.openai_public`` declares (its download function is redirected to the local file),
and HF ``tokenizers`` loading tokenizer.json directly.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import testdata  # noqa: E402
import tiers  # noqa: E402

NAMED = ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]
EXTRA_NAMED = ["gpt2", "p50k_edit", "o200k_harmony"]
HF_FILES = {"qwen2": "qwen2_tokenizer_json", "llama3": "llama3_tokenizer_json"}
CORPUS_KINDS = list(testdata.KINDS)


# ---- test tiers ------------------------------------------------------------------------------
#
# The default tier (``python -m pytest``) is what a contributor runs: every module, every
# backend, every format, every kernel on the emulator in one thread order, parity on sampled
# corpora; minutes on two cores. The full tier (``--full`` or ``GPUTOK_FULL=1``; ``.ci/run``
# turns it on) adds what only scale or repetition finds: the full corpora, the other thread
# orders, SIGKILL rounds, every vocabulary and variant, Ray, megatron-core. A test is in the
# full tier only when it is marked ``@pytest.mark.full``, when ``tests/tiers.py`` lists it
# (with the reason and what the default tier keeps of it), or when it is parametrised over a
# thread order of the emulator other than ``DEFAULT_ORDER``.

FULL_ENV = "GPUTOK_FULL"
DEFAULT_ORDER = "forward"


def full_tier() -> bool:
    """Whether the full tier runs (also for knobs a module reads at import, e.g. kill rounds)."""
    return os.environ.get(FULL_ENV, "") == "1"


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help=f"run the full tier too (the same as {FULL_ENV}=1; see tests/conftest.py)")


# the default tier's sizes (the full tier and CI keep each knob's own default or CI's value);
# a value set in the environment always wins
DEFAULT_TIER_KNOBS = {
    "GPUTOK_CORPUS_MB": "0.5",  # MB of each corpus kind the parity suites sample (full: 2)
    "GPUTOK_FUZZ_EXAMPLES": "60",  # hypothesis examples per fuzz test (full: 200-300)
}


def pytest_configure(config):
    if config.getoption("--full"):
        os.environ[FULL_ENV] = "1"  # seen by knobs read at import and by child processes
    if not full_tier():
        for name, value in DEFAULT_TIER_KNOBS.items():
            os.environ.setdefault(name, value)


ORDER_PARAMS = ("order", "emulated")  # parameters that name a thread order (or start with one)


def _in_default_tier(item) -> bool:
    if item.get_closest_marker("full") is not None or tiers.full_only(item.nodeid):
        return False
    params = getattr(getattr(item, "callspec", None), "params", {})
    for name in ORDER_PARAMS:
        if name in params:
            order = params[name][0] if isinstance(params[name], tuple) else params[name]
            return order == DEFAULT_ORDER
    return True


def _named_files(config) -> set:
    """Test files named with a ``::`` selector on the command line: their tests were asked for
    one by one, so they run whatever their tier (and are not checked against tiers.py)."""
    out = set()
    for arg in config.args:
        if "::" in arg:
            path = Path(arg.split("::", 1)[0]).resolve()
            try:
                out.add(path.relative_to(config.rootpath).as_posix())
            except ValueError:
                pass
    return out


def pytest_collection_modifyitems(config, items):
    named = _named_files(config)
    stale = tiers.stale_entries([it.nodeid for it in items
                                 if it.nodeid.split("::", 1)[0] not in named])
    if stale:  # a renamed test would leave the tier lists silently; say so at once
        raise pytest.UsageError("tests/tiers.py lists tests that do not exist (renamed or "
                                "removed?): " + "; ".join(stale))
    if full_tier():
        return
    out = [it for it in items if not _in_default_tier(it)
           and it.nodeid.split("::", 1)[0] not in named]
    if out:
        config.hook.pytest_deselected(items=out)
        gone = set(map(id, out))
        items[:] = [it for it in items if id(it) not in gone]


def pytest_report_header(config):
    if full_tier():
        return "gputok tests: full tier"
    return (f"gputok tests: default tier (the full tier: --full or {FULL_ENV}=1; its extra tests "
            "show as deselected)")


class LazyMap(dict):
    """A module fixture's files made on first use, key by key: a test run that needs one (the
    default tier, a single test) does not pay for writing them all.

    >>> m = LazyMap({"a": lambda: 1}); m["a"]
    1
    """

    def __init__(self, builders: dict):
        super().__init__()
        self.builders = builders

    def __missing__(self, key):
        self[key] = self.builders[key]()
        return self[key]


def fuzz_examples(default: int = 200) -> int:
    return int(os.environ.get("GPUTOK_FUZZ_EXAMPLES", default))


@functools.lru_cache(maxsize=None)
def tiktoken_oracle(name: str):
    """A real ``tiktoken.Encoding`` for ``name``, built with no network access."""
    import tiktoken
    from tiktoken import load as tk_load
    from tiktoken_ext import openai_public

    files = {"r50k_base": "r50k_base", "p50k_base": "r50k_base", "cl100k_base": "cl100k_base",
             "o200k_base": "o200k_base"}

    def local_ranks(url, expected_hash=None):
        stem = url.rsplit("/", 1)[-1].split(".")[0]
        ranks = tk_load.load_tiktoken_bpe(str(testdata.vocab_path(files.get(stem, stem))))
        if stem == "p50k_base":  # p50k = r50k + runs of 2..25 spaces
            ranks = dict(ranks)
            ranks.update({b" " * n: 50255 + n for n in range(2, 26)})
        return ranks

    def local_data_gym(*_a, **_k):
        return local_ranks("r50k_base.tiktoken")

    orig = openai_public.load_tiktoken_bpe, openai_public.data_gym_to_mergeable_bpe_ranks
    openai_public.load_tiktoken_bpe = local_ranks
    openai_public.data_gym_to_mergeable_bpe_ranks = local_data_gym
    try:
        spec = openai_public.ENCODING_CONSTRUCTORS[name]()
    finally:
        openai_public.load_tiktoken_bpe, openai_public.data_gym_to_mergeable_bpe_ranks = orig
    return tiktoken.Encoding(**spec)


@functools.lru_cache(maxsize=None)
def hf_oracle(key: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(testdata.vocab_path(HF_FILES[key])))


@functools.lru_cache(maxsize=None)
def hf_encoding(key: str):
    import gputok

    return gputok.load(testdata.vocab_path(HF_FILES[key]))


@pytest.fixture(scope="session")
def corpora() -> dict[str, list[str]]:
    return testdata.all_corpora()


@pytest.fixture(scope="session")
def cl100k():
    import gputok

    return gputok.get_encoding("cl100k_base")


@pytest.fixture
def python_sigint():
    """Python's own Ctrl-C handler for the test, whatever this process inherited (a test run
    started in the background of a shell without job control has SIGINT ignored, and so does
    every process it starts); the previous handler is put back after."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def sigint_as_default():
    """``preexec_fn`` of a child a test sends Ctrl-C to: SIGINT's default action in it (a
    Python child then installs its own handler), not an ignored SIGINT inherited from the
    test run (see ``python_sigint``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
