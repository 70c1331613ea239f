"""Which encoding an OpenAI model uses: tiktoken's ``encoding_for_model`` table, as data.

A name is looked up whole first, then by the first of the prefixes below that it starts with, in
this order (the order matters: ``gpt-4o-mini`` must find ``gpt-4o-`` before ``gpt-4-`` could
match, and prefixes match names no model has, as tiktoken's do). Pinned to tiktoken 0.14's
table; tests/test_model_names.py checks every entry and prefix against the installed tiktoken.
"""

from __future__ import annotations

_O200K, _CL100K, _P50K, _R50K = "o200k_base", "cl100k_base", "p50k_base", "r50k_base"

MODELS: dict = {
    # chat and reasoning
    "o1": _O200K, "o3": _O200K, "o4-mini": _O200K, "gpt-5": _O200K, "gpt-4.1": _O200K,
    "gpt-4o": _O200K, "gpt-4": _CL100K, "gpt-3.5-turbo": _CL100K, "gpt-3.5": _CL100K,
    "gpt-35-turbo": _CL100K,
    # base models and embeddings
    "davinci-002": _CL100K, "babbage-002": _CL100K, "text-embedding-ada-002": _CL100K,
    "text-embedding-3-small": _CL100K, "text-embedding-3-large": _CL100K,
    # older text and code models
    "text-davinci-003": _P50K, "text-davinci-002": _P50K, "text-davinci-001": _R50K,
    "text-curie-001": _R50K, "text-babbage-001": _R50K, "text-ada-001": _R50K,
    "davinci": _R50K, "curie": _R50K, "babbage": _R50K, "ada": _R50K,
    "code-davinci-002": _P50K, "code-davinci-001": _P50K, "code-cushman-002": _P50K,
    "code-cushman-001": _P50K, "davinci-codex": _P50K, "cushman-codex": _P50K,
    "text-davinci-edit-001": "p50k_edit", "code-davinci-edit-001": "p50k_edit",
    # old embeddings
    "text-similarity-davinci-001": _R50K, "text-similarity-curie-001": _R50K,
    "text-similarity-babbage-001": _R50K, "text-similarity-ada-001": _R50K,
    "text-search-davinci-doc-001": _R50K, "text-search-curie-doc-001": _R50K,
    "text-search-babbage-doc-001": _R50K, "text-search-ada-doc-001": _R50K,
    "code-search-babbage-code-001": _R50K, "code-search-ada-code-001": _R50K,
    # open source
    "gpt2": "gpt2", "gpt-2": "gpt2",
}

PREFIXES: tuple = (
    ("o1-", _O200K), ("o3-", _O200K), ("o4-mini-", _O200K), ("gpt-5", _O200K),
    ("gpt-4.5-", _O200K), ("gpt-4.1-", _O200K), ("chatgpt-4o-", _O200K), ("gpt-4o-", _O200K),
    ("gpt-4-", _CL100K), ("gpt-3.5-turbo-", _CL100K), ("gpt-35-turbo-", _CL100K),
    ("gpt-oss-", "o200k_harmony"),
    # fine-tuned models
    ("ft:gpt-4o", _O200K), ("ft:gpt-4", _CL100K), ("ft:gpt-3.5-turbo", _CL100K),
    ("ft:davinci-002", _CL100K), ("ft:babbage-002", _CL100K),
)


def encoding_name_for_model(model_name: str) -> str:
    """The name of the encoding ``model_name`` uses; ``KeyError`` for a name the table does not
    know.

    >>> encoding_name_for_model("gpt-4o-mini")
    'o200k_base'
    """
    name = MODELS.get(model_name)
    if name is not None:
        return name
    for prefix, name in PREFIXES:
        if model_name.startswith(prefix):
            return name
    raise KeyError(f"{model_name!r} is not a model gputok knows the encoding of; name the "
                   "encoding instead: gputok.get_encoding('o200k_base') (newer OpenAI models) "
                   "or 'cl100k_base' (gpt-4, gpt-3.5-turbo, text-embedding-3-*)")


def encoding_for_model(model_name: str):
    """The ``Encoding`` of ``model_name`` (bundled, offline), as ``tiktoken.encoding_for_model``.

    >>> encoding_for_model("gpt-4").name
    'cl100k_base'
    """
    from .registry import get_encoding

    return get_encoding(encoding_name_for_model(model_name))
