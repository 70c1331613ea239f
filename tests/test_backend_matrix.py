"""Every model on every backend's every single-text and batch path gives its oracle's ids.

The matrix: {named encodings (r50k, cl100k, o200k), a vocabulary trained with a pattern no
device implements (``\\S+|\\s+``), one model per loader family (tokenizer.json byte-level Qwen2
and Llama 3, a SentencePiece ``.model`` (Mistral), a WordPiece tokenizer.json (MiniLM), a
``gpt2`` GGUF whose pre-tokenizer has no device form)} x {ASCII, multilingual, long, empty} x
{encode, encode_ordinary, encode_batch, encode_batch_arrays} x {numpy, native, the emulated CUDA
device, the Metal backend on ``mlx[cpu]`` with the emulator}, each against the library it
replaces (tiktoken, HF ``tokenizers``, sentencepiece) or ``cpu_ref``.

The texts are long enough to reach each single-text path a backend has (the host cut, the
native device's one call, its few-pieces and batch paths). The long text (over 64K characters:
past the one-call limit, the batch pipeline) runs where the single-text path changes with
length (numpy, native), for a model of each kind of pre-tokenization (``LONG_MODELS``): on the
emulated devices it is the batch path the short texts already take, at the emulator's cost of
one fiber per GPU thread; for the other families, the batch methods' path.
"""

from __future__ import annotations

import functools
import warnings

import pytest

import gputok
import testdata
from conftest import hf_encoding, hf_oracle, tiktoken_oracle
from gputok.backends import FallbackWarning

TEXTS = {
    "ascii": "hello world, the quick brown fox 123 jumps over the lazy dog's back.\n" * 4,
    "multilingual": "Grüße aus Köln, Привет мир! 你好世界。 ça va? 😀 naïve café\n" * 6,
    "long": "mixed text δ 42 with a few words, 😀 emoji and 'quotes'\n" * 1300,
    "empty": "",
}
METHODS = ("encode", "encode_ordinary", "encode_batch", "encode_batch_arrays")
MODELS = ("r50k_base", "cl100k_base", "o200k_base", "custom-pattern", "qwen2", "llama3",
          "mistral", "minilm", "gguf-bloom")
BACKENDS = ("numpy", "native", "emulated-cuda", "emulated-metal")
# the long text where its path differs from the short texts' (numpy: its batch pipeline; native:
# past the one-call limit): a model whose pattern the device cuts, and one whose pieces the host
# cuts (the crash's kind of model)
LONG_MODELS = ("cl100k_base", "custom-pattern")
LONG_BACKENDS = ("numpy", "native")


@functools.lru_cache(maxsize=None)
def _model(key: str, tmp: str) -> tuple:
    """(Encoding, oracle: text -> ids with no special tokens added)."""
    if key in ("r50k_base", "cl100k_base", "o200k_base"):
        return gputok.get_encoding(key), tiktoken_oracle(key).encode_ordinary
    if key == "custom-pattern":
        from cpu_ref.encoding import RefEncoding

        corpus = [t for t in TEXTS.values() if t] * 2
        enc = gputok.train_bpe(corpus, vocab_size=400, pattern=r"\S+|\s+")
        ranks = {enc.decode_single_token_bytes(i): i for i in range(enc.n_vocab)}
        return enc, RefEncoding("ref", pat_str=r"\S+|\s+", mergeable_ranks=ranks,
                                special_tokens={}).encode_ordinary
    if key in ("qwen2", "llama3"):
        hf = hf_oracle(key)
        return hf_encoding(key), lambda t: hf.encode(t, add_special_tokens=False).ids
    if key == "mistral":
        import sentencepiece as spm

        path = testdata.family_path("mistral_v3")
        sp = spm.SentencePieceProcessor(model_file=str(path))
        return gputok.load(path), sp.encode
    if key == "minilm":
        from tokenizers import Tokenizer

        path = testdata.family_path("minilm_tokenizer_json")
        hf = Tokenizer.from_file(str(path))
        hf.no_truncation()
        hf.no_padding()
        return gputok.load(path), lambda t: hf.encode(t, add_special_tokens=False).ids
    if key == "gguf-bloom":  # a pre-tokenizer pattern with no vectorised or device form
        import cpu_ref.gguf
        import families as F

        tk = tiktoken_oracle("r50k_base")
        path = F.gguf_from_tiktoken(tk._mergeable_ranks, tk._special_tokens,
                                    f"{tmp}/r50k-bloom.gguf", pre="bloom")
        return gputok.load(path), cpu_ref.gguf.load(path).encode_ordinary
    raise KeyError(key)


@functools.lru_cache(maxsize=None)
def _want(key: str, tmp: str, text: str) -> list:
    """The oracle's ids of ``text`` (computed once for every backend)."""
    return _model(key, tmp)[1](text)


@functools.lru_cache(maxsize=None)
def _backend(name: str):
    if name == "numpy":
        return "numpy"
    if name == "native":
        from gputok.backends import native

        if not native.available()[0]:
            pytest.skip(native.available()[1])
        return native.create(threads=2)
    if name == "emulated-cuda":
        from devicekit import emu_device

        from gputok.backends.driver import DeviceBackend

        return DeviceBackend(emu_device("shuffle", 1), name="emulated cuda", chunk_bytes=1500)
    pytest.importorskip("mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]'")
    from emulator.mlx_bridge import metal_kernel_maker

    from gputok.backends import metal

    return metal.emulated(metal_kernel_maker(order="reverse", seed=0), block=32, max_blocks=3,
                          chunk_bytes=1500)


def _ids(enc, method: str, text: str, backend) -> list:
    """``method``'s ids of a batch [text, "", half of text] (a single-text method: of text)."""
    batch = [text, "", text[:len(text) // 2]]
    if method == "encode":
        return enc.encode(text, backend=backend)
    if method == "encode_ordinary":
        return enc.encode_ordinary(text, backend=backend)
    if method == "encode_batch":
        return enc.encode_batch(batch, backend=backend)
    ids, off = enc.encode_batch_arrays(batch, backend=backend)
    return [ids[a:b].tolist() for a, b in zip(off[:-1], off[1:])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("key", MODELS)
def test_every_path_gives_the_oracles_ids(key, backend, tmp_path_factory):
    tmp = str(tmp_path_factory.getbasetemp())
    enc = _model(key, tmp)[0]
    be = _backend(backend)
    kinds = [k for k in TEXTS if k != "long" or (key in LONG_MODELS and backend in LONG_BACKENDS)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # (host stages: counted elsewhere)
        for kind in kinds:
            text = TEXTS[kind]
            want = _want(key, tmp, text)
            batch_want = [want, [], _want(key, tmp, text[:len(text) // 2])]
            for method in METHODS:
                got = _ids(enc, method, text, be)
                expect = want if method in ("encode", "encode_ordinary") else batch_want
                assert got == expect, (key, backend, kind, method)
