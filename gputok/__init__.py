"""gputok: exact byte-level BPE tokenization in bulk (tiktoken / HF compatible).

>>> import gputok
>>> enc = gputok.get_encoding("cl100k_base")
>>> enc.decode(enc.encode("hello world"))
'hello world'
"""

# public API
from . import export
from .encoding import Encoding, StreamDecoder
from .model_names import encoding_for_model, encoding_name_for_model
from .registry import get_encoding, list_encoding_names, load
from .train import train_bpe, train_spm_bpe

__version__ = "0.1.0"

__all__ = ["export", "Encoding", "StreamDecoder", "encoding_for_model", "encoding_name_for_model",
           "get_encoding", "list_encoding_names", "load", "train_bpe", "train_spm_bpe",
           "__version__"]
