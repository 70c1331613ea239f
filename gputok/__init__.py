"""gputok: exact byte-level BPE tokenization in bulk (tiktoken / HF compatible).

>>> import gputok
>>> enc = gputok.get_encoding("cl100k_base")
>>> enc.decode(enc.encode("hello world"))
'hello world'

``import gputok`` imports nothing else (not even numpy): each name below is imported on first
use (PEP 562), so a process pays only for what its first call needs.
"""

import importlib

__version__ = "0.1.0"

# public API: name -> the module that defines it
_PUBLIC = {
    "Encoding": "gputok.encoding",
    "StreamDecoder": "gputok.encoding",
    "encoding_for_model": "gputok.model_names",
    "encoding_name_for_model": "gputok.model_names",
    "get_encoding": "gputok.registry",
    "list_encoding_names": "gputok.registry",
    "load": "gputok.registry",
    "train_bpe": "gputok.train",
    "train_spm_bpe": "gputok.train",
}

__all__ = ["export", "Encoding", "StreamDecoder", "encoding_for_model", "encoding_name_for_model",
           "get_encoding", "list_encoding_names", "load", "train_bpe", "train_spm_bpe",
           "__version__"]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # (once: later lookups are plain attributes)
        return value
    if not name.startswith("_"):  # a subpackage: gputok.export, gputok.backends, ...
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
