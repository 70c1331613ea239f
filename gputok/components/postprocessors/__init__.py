"""Post-processors: one encoded text's ids -> with the model's special tokens added
(``components.PostProcessor``), applied only when asked (``add_special_tokens=True``).

    NoPost     nothing is added (tiktoken encodings; the default of every model)
    Template   fixed ids before and after the text's: what HF's TemplateProcessing (single),
               BertProcessing and RobertaProcessing add ([CLS] ... [SEP], <s> ... </s>), and
               what sentencepiece's ``add_bos`` / llama.cpp's ``add_bos``/``add_eos``/``add_sep``
               add

``cpu_ref/post.py`` states where each library puts which ids; the loaders build the Template.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NoPost", "NO_POST", "Template"]


class NoPost:
    """Adds nothing."""

    prefix = suffix = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NoPost()"

    def apply(self, ids: list) -> list:
        return ids

    def apply_arrays(self, ids, offsets):
        return ids, offsets


NO_POST = NoPost()


class Template:
    """``prefix`` ids, the text's ids, ``suffix`` ids.

    >>> t = Template((101,), (102,))
    >>> t.apply([7, 8])
    [101, 7, 8, 102]
    >>> ids, off = t.apply_arrays(np.array([7, 8, 9], np.uint32), np.array([0, 2, 3]))
    >>> ids.tolist(), off.tolist()
    ([101, 7, 8, 102, 101, 9, 102], [0, 4, 7])
    """

    def __init__(self, prefix=(), suffix=()):
        self.prefix = tuple(int(i) for i in prefix)
        self.suffix = tuple(int(i) for i in suffix)

    def __bool__(self) -> bool:
        return bool(self.prefix or self.suffix)

    def __repr__(self) -> str:
        return f"Template({list(self.prefix)} + $A + {list(self.suffix)})"

    def apply(self, ids: list) -> list:
        return [*self.prefix, *ids, *self.suffix] if self else ids

    def apply_arrays(self, ids: np.ndarray, offsets: np.ndarray):
        """The same on a ragged batch: every document gets the prefix and the suffix."""
        if not self:
            return ids, offsets
        p, s = len(self.prefix), len(self.suffix)
        n = len(offsets) - 1
        offsets = np.asarray(offsets, np.int64)
        lens = np.diff(offsets)
        new_off = offsets + np.arange(n + 1, dtype=np.int64) * (p + s)
        out = np.empty(int(new_off[-1]), ids.dtype if len(ids) else np.uint32)
        # each id moves by the extra ids of the documents before it, plus its own prefix
        doc = np.repeat(np.arange(n, dtype=np.int64), lens)
        out[np.arange(len(ids), dtype=np.int64) + doc * (p + s) + p] = ids
        for k, t in enumerate(self.prefix):
            out[new_off[:-1] + k] = t
        for k, t in enumerate(self.suffix):
            out[new_off[1:] - s + k] = t
        return out, new_off
