"""Encoding: tiktoken's API (drop-in) over a ``Model``, plus batch methods returning arrays."""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from .decode import StreamDecoder, as_int_list
from .model import Model
from . import onetext
from .specials import check_disallowed, special_args

AllowedSpecial = "Literal['all'] | AbstractSet[str]"
DisallowedSpecial = "Literal['all'] | Collection[str]"
Backend = "str | gputok.backends.Backend"  # a name ("auto", "numpy", "native", ...) or object
# (what a call needs is imported on its first use: loading a file imports no backend)
def get_backend(name):
    from .backends import get_backend as get

    return get(name)


def without(ids: list, drop: int) -> list:
    from .loaders.bytelevel_gaps import without as drop_from

    return drop_from(ids, drop)


def without_arrays(ids, offsets, drop: int):
    from .loaders.bytelevel_gaps import without_arrays as drop_from

    return drop_from(ids, offsets, drop)


_NO_SPECIALS = frozenset()  # ``encode``'s default allowed_special (compared by identity)
_EOT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>")


class Encoding:
    """A tokenizer with tiktoken's interface.

    >>> enc = gputok.get_encoding("cl100k_base")
    >>> enc.encode("hello world")
    [15339, 1917]
    """

    def __init__(self, name: str, *, pat_str: str, mergeable_ranks: dict[bytes, int],
                 special_tokens: dict[str, int], explicit_n_vocab: "int | None" = None):
        """Build an Encoding from tiktoken-style parts (the arguments of ``tiktoken.Encoding``):
        ids are ranks, and merge priority is rank.

        >>> enc = Encoding("tiny", pat_str=r"\\S+|\\s+", special_tokens={"<eot>": 258},
        ...                mergeable_ranks={bytes([b]): b for b in range(256)} | {b"ab": 256})
        >>> enc.encode("ab")
        [256]
        """
        model = Model.from_ranks(name, pat_str=pat_str, ranks=mergeable_ranks,
                                 specials=special_tokens)
        if explicit_n_vocab is not None and (
                len(mergeable_ranks) + len(special_tokens) != explicit_n_vocab
                or model.max_token_value != explicit_n_vocab - 1):
            raise ValueError(f"{name}: expected {explicit_n_vocab} tokens, got "
                             f"{len(mergeable_ranks)} + {len(special_tokens)} special")
        self._bind(model)

    @classmethod
    def from_model(cls, model: Model) -> "Encoding":
        """The Encoding of a ``Model`` (what loaders return).

        >>> Encoding.from_model(gputok.get_encoding("gpt2").model).encode("hi")
        [5303]
        """
        self = cls.__new__(cls)
        self._bind(model)
        return self

    def _bind(self, model: Model) -> None:
        self.model = model
        self.name = model.name
        self.max_token_value = model.max_token_value
        self._text_calls = onetext.TextCalls()  # backend name -> ``text_call``; ``special_search``
        self._drop = model.drop_id is not None
        if model.segmenter.byte_level:
            from .backends.device_tables import prefetch

            prefetch(model)  # a device's first batch finds its tables read

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r}>"

    # ==== encoding ===============================================================================

    def encode_ordinary(self, text: str, *, backend: Backend = "auto",
                        add_special_tokens: bool = False) -> list[int]:
        """Encode ``text`` ignoring special tokens (they are encoded as plain text).

        Equivalent to ``encode(text, disallowed_special=())`` (but slightly faster).
        ``backend``: ``"auto"``, a backend name (``gputok info`` lists them) or a backend object.

        >>> enc.encode_ordinary("<|endoftext|>")
        [27, 91, 8862, 728, 428, 91, 29]
        """
        got = (self._text_calls.get(backend) or onetext.text_call(self, backend))(text)
        return self._finish_list(got, add_special_tokens) if add_special_tokens or self._drop \
            else got

    def encode(self, text: str, *, allowed_special: AllowedSpecial = _NO_SPECIALS,
               disallowed_special: DisallowedSpecial = "all", backend: Backend = "auto",
               add_special_tokens: bool = False) -> list[int]:
        """Encode ``text``. Special-token text raises ``ValueError`` unless allowed or disabled.

        - ``allowed_special``: specials to encode as their control ids (``"all"`` for all).
        - ``disallowed_special``: specials whose presence raises (default: all not allowed);
          ``()`` encodes special-token text as ordinary text.
        - ``backend``: where it runs (as ``encode_ordinary``).
        - ``add_special_tokens``: add what the model's library adds around a text by default
          (HF's post-processor, sentencepiece's BOS, llama.cpp's BOS/EOS/SEP; nothing for
          tiktoken encodings). Off by default, as in tiktoken.

        >>> enc.encode("hi<|endoftext|>", allowed_special={"<|endoftext|>"})
        [6151, 100257]
        """
        if allowed_special is _NO_SPECIALS and disallowed_special == "all":  # the defaults
            if (self._text_calls.get(onetext.SEARCH) or onetext.special_search(self))(text):
                check_disallowed(text, self.model.special_set)
            allowed = _NO_SPECIALS
        else:
            allowed, disallowed = self._special_args(allowed_special, disallowed_special)
            if disallowed:
                check_disallowed(text, disallowed)
        if allowed:
            got = get_backend(backend).encode_text(self.model, text, allowed)
        else:
            got = (self._text_calls.get(backend) or onetext.text_call(self, backend))(text)
        return self._finish_list(got, add_special_tokens) if add_special_tokens or self._drop \
            else got

    def _finish_list(self, ids: list, add_special_tokens: bool) -> list:
        """One text's ids as returned: without the drop id, with the post-processor's ids."""
        if self.model.drop_id is not None:
            ids = without(ids, self.model.drop_id)
        return self.model.post.apply(ids) if add_special_tokens else ids

    def encode_to_numpy(self, text: str, *, allowed_special: AllowedSpecial = frozenset(),
                        disallowed_special: DisallowedSpecial = "all",
                        backend: Backend = "auto", add_special_tokens: bool = False
                        ) -> np.ndarray:
        """``encode`` returning a numpy array (uint16 when the vocabulary fits, else uint32).

        >>> enc.encode_to_numpy("hello world").tolist()
        [15339, 1917]
        """
        ids = self.encode(text, allowed_special=allowed_special,
                          disallowed_special=disallowed_special, backend=backend,
                          add_special_tokens=add_special_tokens)
        return np.array(ids, dtype=self.id_dtype)

    def encode_ordinary_batch(self, text: Sequence[str], *, num_threads: int = 8,
                              backend: Backend = "auto",
                              add_special_tokens: bool = False) -> list[list[int]]:
        """Encode a list of strings, ignoring special tokens.

        ``num_threads``: tiktoken's argument, kept so its calls run unchanged; the threads are
        the backend's (the native backend: ``$GPUTOK_NUM_THREADS``, else every core).

        >>> enc.encode_ordinary_batch(["hello world", "goodbye world"])
        [[15339, 1917], [19045, 29474, 1917]]
        """
        return self.encode_batch(text, disallowed_special=(), backend=backend,
                                 add_special_tokens=add_special_tokens)

    def encode_batch(self, text: Sequence[str], *, num_threads: int = 8,
                     allowed_special: AllowedSpecial = frozenset(),
                     disallowed_special: DisallowedSpecial = "all",
                     backend: Backend = "auto",
                     add_special_tokens: bool = False) -> list[list[int]]:
        """Encode a list of strings; see ``encode`` for the special-token arguments and
        ``encode_ordinary_batch`` for ``num_threads``.

        >>> enc.encode_batch(["hello world", "goodbye world"])
        [[15339, 1917], [19045, 29474, 1917]]
        """
        be = get_backend(backend)
        ids, offsets = self.encode_batch_arrays(text, allowed_special=allowed_special,
                                                disallowed_special=disallowed_special,
                                                backend=be,
                                                add_special_tokens=add_special_tokens)
        flat, off = be.id_list(ids), offsets.tolist()
        return [flat[a:b] for a, b in zip(off, off[1:])]

    def encode_single_token(self, text_or_bytes: "str | bytes") -> int:
        """The id of a text that is exactly one token (specials included); else ``KeyError``.

        >>> enc.encode_single_token("hello")
        15339
        """
        m = self.model
        if isinstance(text_or_bytes, str):
            if text_or_bytes in m.specials or text_or_bytes in m.added:
                return m.token_id(text_or_bytes)
            tok = m.segmenter.token_id(text_or_bytes)  # as the vocabulary spells it ("▁the")
            if tok is not None:
                return tok
            text_or_bytes = text_or_bytes.encode("utf-8")
        tok = m.token_ids_by_bytes.get(text_or_bytes)
        if tok is None:
            raise KeyError(text_or_bytes)
        return tok

    # ---- batch methods that return arrays (the device-served path) ----------------------------

    def encode_batch_arrays(self, texts, *, allowed_special: AllowedSpecial = frozenset(),
                            disallowed_special: DisallowedSpecial = "all",
                            backend: Backend = "auto", errors: str = "strict",
                            add_special_tokens: bool = False
                            ) -> tuple[np.ndarray, np.ndarray]:
        """Encode a batch into one ragged array: ``(ids, offsets)``.

        ``texts``: a list of str, a list of UTF-8 bytes, or a pyarrow string/binary array (read
        through its buffers). Document ``i``'s ids are ``ids[offsets[i]:offsets[i + 1]]``.
        ``ids`` is uint16 when the vocabulary fits, else uint32; ``offsets`` is int64.
        ``errors`` applies to bytes input that is not valid UTF-8 (``"strict"`` raises
        ``ValueError`` naming the document; ``"replace"`` decodes to U+FFFD).
        ``backend``: ``"auto"``, a backend name (``gputok info`` lists them) or a backend object.
        ``add_special_tokens``: every document gets what ``encode`` adds with it.

        >>> ids, offsets = enc.encode_batch_arrays(["hello world", "hi"])
        >>> ids.tolist(), offsets.tolist()
        ([15339, 1917, 6151], [0, 2, 3])
        """
        allowed, disallowed = self._special_args(allowed_special, disallowed_special)
        from .stages.pack import Documents

        docs = Documents(texts, errors=errors)
        ids, offsets = get_backend(backend).encode(self.model, docs, allowed, disallowed)
        if self.model.drop_id is not None:  # pieces made only of bytes the vocabulary lacks
            ids, offsets = without_arrays(ids, offsets, self.model.drop_id)
        if add_special_tokens:
            ids, offsets = self.model.post.apply_arrays(ids, offsets)
        return ids, offsets

    def encode_batch_padded(self, texts, *, max_length: "int | None" = None,
                            padding_side: str = "right", truncation_side: str = "right",
                            pad_id: "int | None" = None, pad_to_multiple_of: "int | None" = None,
                            allowed_special: AllowedSpecial = frozenset(),
                            disallowed_special: DisallowedSpecial = "all",
                            backend: Backend = "auto", add_special_tokens: bool = False
                            ) -> tuple[np.ndarray, np.ndarray]:
        """Encode a batch into a rectangle: ``(ids[B, L], attention_mask[B, L])``.

        See ``pad`` for the padding and truncation options.

        >>> ids, mask = enc.encode_batch_padded(["hello world", "hi"], pad_id=0)
        >>> ids.tolist(), mask.tolist()
        ([[15339, 1917], [6151, 0]], [[1, 1], [1, 0]])
        """
        ids, offsets = self.encode_batch_arrays(texts, allowed_special=allowed_special,
                                                disallowed_special=disallowed_special,
                                                backend=backend,
                                                add_special_tokens=add_special_tokens)
        return self.pad(ids, offsets, max_length=max_length, padding_side=padding_side,
                        truncation_side=truncation_side, pad_id=pad_id,
                        pad_to_multiple_of=pad_to_multiple_of)

    def pad(self, ids: np.ndarray, offsets: np.ndarray, *, max_length: "int | None" = None,
            padding_side: str = "right", truncation_side: str = "right",
            pad_id: "int | None" = None, pad_to_multiple_of: "int | None" = None
            ) -> tuple[np.ndarray, np.ndarray]:
        """Turn ragged ``(ids, offsets)`` into ``(ids[B, L], attention_mask[B, L])``.

        - ``L`` is the longest document, capped at ``max_length`` (longer ones are truncated on
          ``truncation_side``: ``"right"`` keeps the first tokens, ``"left"`` the last), then
          rounded up to ``pad_to_multiple_of``.
        - ``padding_side``: ``"right"`` (training) or ``"left"`` (batched generation).
        - ``pad_id``: the filler id (default: ``eot_token`` if the encoding has one, else 0);
          ``attention_mask`` is 1 on real tokens and 0 on padding (uint8).

        >>> ids, mask = enc.pad(np.array([1, 2, 3]), np.array([0, 2, 3]), padding_side="left")
        >>> ids.tolist()
        [[1, 2], [100257, 3]]
        """
        if pad_id is None:
            pad_id = self._eot_or_none()
            pad_id = 0 if pad_id is None else pad_id
        from . import padding

        return padding.pad(ids, offsets, pad_id=pad_id, max_length=max_length,
                           padding_side=padding_side, truncation_side=truncation_side,
                           pad_to_multiple_of=pad_to_multiple_of, id_dtype=self.id_dtype)

    # ==== decoding ===============================================================================

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """The bytes of ``tokens`` concatenated (exact; unknown ids raise ``KeyError``).

        >>> enc.decode_bytes([15339, 1917])
        b'hello world'
        """
        join = self._text_calls.get(onetext.JOIN)
        got = (join if join is not None else onetext.one_join(self))(tokens)
        return got if got is not None else self.model.detok.decode_bytes(tokens)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        """Decode to text. Lossy by default: bytes that are not valid UTF-8 become U+FFFD
        (``errors="strict"`` raises instead).

        >>> enc.decode([15339, 1917])
        'hello world'
        """
        join = self._text_calls.get(onetext.JOIN)
        got = (join if join is not None else onetext.one_join(self))(tokens)
        return got.decode("utf-8", errors) if got is not None \
            else self.model.detok.decode(tokens, errors)

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one token (specials included); unknown ids raise ``KeyError``.

        >>> enc.decode_single_token_bytes(15339)
        b'hello'
        """
        try:
            return self.model.decoder[int(token)]
        except KeyError:
            raise KeyError(f"invalid token for decoding: {token}") from None

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes, for visualising a tokenisation.

        >>> enc.decode_tokens_bytes([15339, 1917])
        [b'hello', b' world']
        """
        return [self.decode_single_token_bytes(t) for t in as_int_list(tokens)]

    def decode_with_offsets(self, tokens: Sequence[int]) -> tuple[str, list[int]]:
        """Decoded text and each token's start index in it (a token that starts inside a
        character points at that character). Raises on invalid UTF-8.

        >>> enc.decode_with_offsets([15339, 1917])
        ('hello world', [0, 5])
        """
        parts = self.decode_tokens_bytes(tokens)
        offsets, n_chars = [], 0
        for b in parts:
            # continuation bytes (0b10xxxxxx) do not start a character
            offsets.append(max(0, n_chars - (0x80 <= b[0] < 0xC0)) if b else n_chars)
            n_chars += sum(1 for c in b if not 0x80 <= c < 0xC0)
        return b"".join(parts).decode("utf-8", errors="strict"), offsets

    def decode_batch(self, batch: Sequence[Sequence[int]], *, errors: str = "replace",
                     num_threads: int = 8, backend: Backend = "auto") -> list[str]:
        """Decode a list of token lists (each as ``decode``). With a native backend the whole
        batch's token bytes are looked up and joined in one call.

        >>> enc.decode_batch([[15339], [1917]])
        ['hello', ' world']
        """
        detok = self.model.detok
        if not hasattr(detok, "decode_batch"):
            return [self.decode(t, errors=errors) for t in batch]
        return detok.decode_batch(batch, errors, self._joiner(batch, backend))

    def decode_bytes_batch(self, batch: Sequence[Sequence[int]], *, num_threads: int = 8,
                           backend: Backend = "auto") -> list[bytes]:
        """Decode a list of token lists to bytes.

        >>> enc.decode_bytes_batch([[15339], [1917]])
        [b'hello', b' world']
        """
        detok = self.model.detok
        if not hasattr(detok, "decode_bytes_batch"):
            return [self.decode_bytes(t) for t in batch]
        return detok.decode_bytes_batch(batch, self._joiner(batch, backend))

    @staticmethod
    def _joiner(batch, backend):
        """The backend's batch join (``HostTools.joiner``), for a batch worth a native call."""
        if not isinstance(batch, (list, tuple)) or len(batch) < 2:
            return None
        return getattr(get_backend(backend).tools, "joiner", None)

    def stream_decoder(self, errors: str = "replace") -> StreamDecoder:
        """A decoder for token streams that holds back an incomplete UTF-8 tail between calls.

        >>> dec = enc.stream_decoder()
        >>> dec.feed(enc.encode("h\\u00e9")[:1]) + dec.feed(enc.encode("h\\u00e9")[1:]) + dec.flush()
        'hé'
        """
        return self.model.detok.stream(errors)

    # ==== miscellaneous ==========================================================================

    @property
    def n_vocab(self) -> int:
        """Number of ids (``max_token_value + 1``)."""
        return self.max_token_value + 1

    @property
    def id_dtype(self) -> type:
        """numpy dtype of id arrays: uint16 when every id fits, else uint32."""
        return self.model.id_dtype

    @property
    def eot_token(self) -> int:
        """The end-of-text special token's id.

        >>> enc.eot_token
        100257
        """
        eot = self._eot_or_none()
        if eot is None:
            raise KeyError(f"{self.name} has no end-of-text special token "
                           f"(specials: {sorted(self.model.specials)[:8]}...)")
        return eot

    def _eot_or_none(self) -> "int | None":
        specials = self.model.specials
        return next((specials[n] for n in _EOT_NAMES if n in specials), None)

    @functools.cached_property
    def special_tokens_set(self) -> set[str]:
        """The special tokens' strings."""
        return set(self.model.specials)

    def is_special_token(self, token: int) -> bool:
        return token in self._special_ids

    @functools.cached_property
    def _special_ids(self) -> frozenset:
        return frozenset(self.model.specials.values())

    def token_byte_values(self) -> list[bytes]:
        """Every mergeable (non-special) token's bytes."""
        return list(self.model.token_ids_by_bytes)

    @property
    def pat_str(self) -> "str | None":
        """The pre-tokenizer regex (``None`` for multi-step HF pre-tokenizers)."""
        pre = self.model.pretok
        return pre.pattern if pre is not None else None

    # tiktoken exposes these private attributes and some code reads them
    @property
    def _pat_str(self) -> "str | None":
        return self.pat_str

    @property
    def _mergeable_ranks(self) -> "dict[bytes, int] | None":
        return self.model.ranks

    @property
    def _special_tokens(self) -> dict[str, int]:
        return dict(self.model.specials)

    # ==== private ================================================================================

    def _special_args(self, allowed_special, disallowed_special):
        return special_args(self.model.special_set, allowed_special, disallowed_special)
