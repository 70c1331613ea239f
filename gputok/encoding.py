"""Encoding: tiktoken's API (drop-in), plus batch methods that return numpy arrays."""

from __future__ import annotations

import functools
import hashlib
from itertools import chain
from typing import Sequence

import numpy as np

from cpu_ref.bpe import bpe_tiktoken
from cpu_ref.decode import StreamDecoder as _RefStreamDecoder
from cpu_ref.specials import (check_disallowed, fix_surrogates, normalize_special_args,
                              split_specials, strip_around)

from .stages.merge import LONG_PIECE, MergeTable, merge_long, merge_small
from .stages.pretok import RegexPretokenizer

_CACHE_LIMIT = 1 << 20  # pieces; the cache is dropped wholesale past this (cheap, rare)
_BATCH_PATH_MIN = 1 << 16  # characters; longer single texts take the batch pipeline

AllowedSpecial = "Literal['all'] | AbstractSet[str]"
DisallowedSpecial = "Literal['all'] | Collection[str]"


class Encoding:
    """A byte-level BPE tokenizer with tiktoken's interface.

    >>> enc = gputok.get_encoding("cl100k_base")
    >>> enc.encode("hello world")
    [15339, 1917]
    """

    def __init__(self, name: str, *, pat_str: str, mergeable_ranks: dict[bytes, int],
                 special_tokens: dict[str, int], explicit_n_vocab: "int | None" = None):
        """Build an Encoding from tiktoken-style parts (the same arguments as
        ``tiktoken.Encoding``): ids are ranks, and merge priority is rank.

        >>> enc = Encoding("tiny", pat_str=r"\\S+|\\s+", special_tokens={"<eot>": 258},
        ...                mergeable_ranks={bytes([b]): b for b in range(256)} | {b"ab": 256})
        >>> enc.encode("ab")
        [256]
        """
        missing = [b for b in range(256) if bytes([b]) not in mergeable_ranks]
        if missing:
            raise ValueError(f"mergeable_ranks lacks {len(missing)} of the 256 single-byte tokens "
                             f"(first: {bytes([missing[0]])!r}); byte-level BPE needs all of them")
        self._mergeable_ranks = mergeable_ranks
        decoder = {r: b for b, r in mergeable_ranks.items()}
        if len(decoder) != len(mergeable_ranks):
            raise ValueError("mergeable_ranks maps two different byte strings to the same rank")
        self._setup(name, pretok=RegexPretokenizer(pat_str), pat_str=pat_str, decoder=decoder,
                    special_tokens=special_tokens, plain_added={},
                    table_factory=lambda: MergeTable.from_ranks(
                        mergeable_ranks, cache_key=self._ranks_digest),
                    whole=mergeable_ranks)
        if explicit_n_vocab is not None:
            if len(mergeable_ranks) + len(special_tokens) != explicit_n_vocab or \
                    self.max_token_value != explicit_n_vocab - 1:
                raise ValueError(f"{name}: expected {explicit_n_vocab} tokens, got "
                                 f"{len(mergeable_ranks)} + {len(special_tokens)} special")

    # The constructor used by loaders that are not tiktoken-shaped (HF tokenizer.json).
    @classmethod
    def _from_parts(cls, name: str, *, pretok, pat_str: "str | None", decoder: dict[int, bytes],
                    special_tokens: dict[str, int], plain_added: dict[str, int], table_factory,
                    whole: "dict[bytes, int] | None", lstrip=frozenset(), rstrip=frozenset()
                    ) -> "Encoding":
        self = cls.__new__(cls)
        self._mergeable_ranks = None
        self._setup(name, pretok=pretok, pat_str=pat_str, decoder=decoder,
                    special_tokens=special_tokens, plain_added=plain_added,
                    table_factory=table_factory, whole=whole)
        # HF added-token options: these tokens swallow the whitespace before / after them
        self._lstrip, self._rstrip = frozenset(lstrip), frozenset(rstrip)
        return self

    def _setup(self, name, *, pretok, pat_str, decoder, special_tokens, plain_added,
               table_factory, whole):
        self.name = name
        self._pat_str = pat_str
        self._pretok = pretok
        self._special_tokens = dict(special_tokens)
        self._plain_added = dict(plain_added)  # HF non-special added tokens: always split out
        self._decoder = dict(decoder)
        for s, i in chain(self._special_tokens.items(), self._plain_added.items()):
            self._decoder[i] = s.encode("utf-8")
        self._special_token_values = set(self._special_tokens.values())
        self._table_factory = table_factory
        self._whole = whole
        self._cache: dict[str, tuple[int, ...]] = {}
        self.max_token_value = max(self._decoder)
        self._lstrip = self._rstrip = frozenset()

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r}>"

    # ==== encoding ===============================================================================

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode ``text`` ignoring special tokens (they are encoded as plain text).

        Equivalent to ``encode(text, disallowed_special=())`` (but slightly faster).

        >>> enc.encode_ordinary("<|endoftext|>")
        [27, 91, 8862, 728, 428, 91, 29]
        """
        if len(text) >= _BATCH_PATH_MIN:
            return self._encode_large(text, frozenset(), frozenset())
        text = fix_surrogates(text)
        if self._plain_added:
            return self._encode_segments(text, frozenset())
        return self._encode_pieces(self._pretok.split(text))

    def _encode_large(self, text: str, allowed: frozenset, disallowed: frozenset) -> list[int]:
        """One big text through the numpy batch pipeline: its many distinct pieces are merged
        in vectorised rounds instead of one by one (e.g. 5x faster on base64 blobs)."""
        from .backends import get_backend
        from .stages.pack import Documents

        ids, _ = get_backend("numpy").encode_documents(self, Documents([text]), allowed,
                                                       disallowed)
        return ids.tolist()

    def encode(self, text: str, *, allowed_special: AllowedSpecial = frozenset(),
               disallowed_special: DisallowedSpecial = "all") -> list[int]:
        """Encode ``text``. Special-token text raises ``ValueError`` unless allowed or disabled.

        - ``allowed_special``: specials to encode as their control ids (``"all"`` for all).
        - ``disallowed_special``: specials whose presence raises (default: all not allowed);
          ``()`` encodes special-token text as ordinary text.

        >>> enc.encode("hi<|endoftext|>", allowed_special={"<|endoftext|>"})
        [6151, 100257]
        """
        allowed, disallowed = self._special_args(allowed_special, disallowed_special)
        if disallowed:
            check_disallowed(text, disallowed)
        if len(text) >= _BATCH_PATH_MIN:
            return self._encode_large(text, allowed, frozenset())
        text = fix_surrogates(text)
        if not allowed and not self._plain_added:
            return self._encode_pieces(self._pretok.split(text))
        return self._encode_segments(text, allowed)

    def encode_to_numpy(self, text: str, *, allowed_special: AllowedSpecial = frozenset(),
                        disallowed_special: DisallowedSpecial = "all") -> np.ndarray:
        """``encode`` returning a numpy array (uint16 when the vocabulary fits, else uint32).

        >>> enc.encode_to_numpy("hello world").tolist()
        [15339, 1917]
        """
        ids = self.encode(text, allowed_special=allowed_special,
                          disallowed_special=disallowed_special)
        return np.array(ids, dtype=self.id_dtype)

    def encode_ordinary_batch(self, text: Sequence[str], *, num_threads: int = 8) -> list[list[int]]:
        """Encode a list of strings, ignoring special tokens.

        ``num_threads`` is accepted for tiktoken compatibility; the batch runs on the backend.

        >>> enc.encode_ordinary_batch(["hello world", "goodbye world"])
        [[15339, 1917], [19045, 29474, 1917]]
        """
        return [self.encode_ordinary(t) for t in text]

    def encode_batch(self, text: Sequence[str], *, num_threads: int = 8,
                     allowed_special: AllowedSpecial = frozenset(),
                     disallowed_special: DisallowedSpecial = "all") -> list[list[int]]:
        """Encode a list of strings; see ``encode`` for the special-token arguments.

        >>> enc.encode_batch(["hello world", "goodbye world"])
        [[15339, 1917], [19045, 29474, 1917]]
        """
        allowed, disallowed = self._special_args(allowed_special, disallowed_special)
        return [self.encode(t, allowed_special=allowed, disallowed_special=disallowed)
                for t in text]

    def encode_single_token(self, text_or_bytes: "str | bytes") -> int:
        """The id of a text that is exactly one token (specials included); else ``KeyError``.

        >>> enc.encode_single_token("hello")
        15339
        """
        if isinstance(text_or_bytes, str):
            if text_or_bytes in self._special_tokens:
                return self._special_tokens[text_or_bytes]
            if text_or_bytes in self._plain_added:
                return self._plain_added[text_or_bytes]
            text_or_bytes = text_or_bytes.encode("utf-8")
        tok = self._token_ids_by_bytes.get(text_or_bytes)
        if tok is None:
            raise KeyError(text_or_bytes)
        return tok

    # ---- batch methods that return arrays (the GPU-served path) -------------------------------

    def encode_batch_arrays(self, texts, *, allowed_special: AllowedSpecial = frozenset(),
                            disallowed_special: DisallowedSpecial = "all", backend: str = "auto",
                            errors: str = "strict") -> tuple[np.ndarray, np.ndarray]:
        """Encode a batch into one ragged array: ``(ids, offsets)``.

        ``texts``: a list of str, a list of UTF-8 bytes, or a pyarrow string/binary array (read
        through its buffers). Document ``i``'s ids are ``ids[offsets[i]:offsets[i + 1]]``.
        ``ids`` is uint16 when the vocabulary fits, else uint32; ``offsets`` is int64.
        ``errors`` applies to bytes input that is not valid UTF-8 (``"strict"`` raises
        ``ValueError`` naming the document; ``"replace"`` decodes to U+FFFD).

        >>> ids, offsets = enc.encode_batch_arrays(["hello world", "hi"])
        >>> ids.tolist(), offsets.tolist()
        ([15339, 1917, 6151], [0, 2, 3])
        """
        from .backends import get_backend
        from .stages.pack import Documents

        allowed, disallowed = self._special_args(allowed_special, disallowed_special)
        docs = Documents(texts, errors=errors)
        return get_backend(backend).encode_documents(self, docs, allowed, disallowed)

    def encode_batch_padded(self, texts, *, max_length: "int | None" = None,
                            padding_side: str = "right", truncation_side: str = "right",
                            pad_id: "int | None" = None, pad_to_multiple_of: "int | None" = None,
                            allowed_special: AllowedSpecial = frozenset(),
                            disallowed_special: DisallowedSpecial = "all",
                            backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Encode a batch into a rectangle: ``(ids[B, L], attention_mask[B, L])``.

        See ``pad`` for the padding and truncation options.

        >>> ids, mask = enc.encode_batch_padded(["hello world", "hi"], pad_id=0)
        >>> ids.tolist(), mask.tolist()
        ([[15339, 1917], [6151, 0]], [[1, 1], [1, 0]])
        """
        ids, offsets = self.encode_batch_arrays(texts, allowed_special=allowed_special,
                                                disallowed_special=disallowed_special,
                                                backend=backend)
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
        - ``pad_id``: the filler id (default: the end-of-text token if the encoding has one,
          else 0); ``attention_mask`` is 1 on real tokens and 0 on padding (uint8).

        >>> ids, mask = enc.pad(np.array([1, 2, 3]), np.array([0, 2, 3]), padding_side="left")
        >>> ids.tolist()
        [[1, 2], [100257, 3]]
        """
        if padding_side not in ("left", "right") or truncation_side not in ("left", "right"):
            raise ValueError("padding_side and truncation_side must be 'left' or 'right'")
        if max_length is not None and max_length < 0:
            raise ValueError("max_length must be >= 0")
        if pad_to_multiple_of is not None and pad_to_multiple_of <= 0:
            raise ValueError("pad_to_multiple_of must be a positive int")
        ids = np.asarray(ids)
        offsets = np.asarray(offsets, dtype=np.int64)
        if pad_id is None:
            pad_id = self._special_tokens.get("<|endoftext|>", 0)
        lengths = np.diff(offsets)
        width = int(lengths.max(initial=0))
        if max_length is not None:
            width = min(width, max_length)
        if pad_to_multiple_of:
            width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
            if max_length is not None and width > max_length:
                width -= pad_to_multiple_of  # stay within the cap the caller gave
        keep = np.minimum(lengths, width)
        # first source token per row: truncating on the left skips the head of long documents
        src0 = offsets[:-1] + (lengths - keep if truncation_side == "left" else 0)
        col = np.arange(width, dtype=np.int64)[None, :]
        shift = (width - keep)[:, None] if padding_side == "left" else 0
        j = col - shift  # position inside the kept tokens
        mask = (j >= 0) & (j < keep[:, None])
        out = np.full((len(lengths), width), pad_id, dtype=ids.dtype if len(ids) else self.id_dtype)
        out[mask] = ids[(src0[:, None] + j)[mask]]
        return out, mask.astype(np.uint8)

    # ==== decoding ===============================================================================

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """The bytes of ``tokens`` concatenated (exact; unknown ids raise ``KeyError``).

        >>> enc.decode_bytes([15339, 1917])
        b'hello world'
        """
        d = self._decoder
        try:
            return b"".join([d[t] for t in _as_int_list(tokens)])
        except KeyError as e:
            raise KeyError(f"invalid token for decoding: {e.args[0]}") from None

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        """Decode to text. Lossy by default: bytes that are not valid UTF-8 become U+FFFD
        (``errors="strict"`` raises instead).

        >>> enc.decode([15339, 1917])
        'hello world'
        """
        return self.decode_bytes(tokens).decode("utf-8", errors=errors)

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one token (specials included); unknown ids raise ``KeyError``.

        >>> enc.decode_single_token_bytes(15339)
        b'hello'
        """
        try:
            return self._decoder[int(token)]
        except KeyError:
            raise KeyError(f"invalid token for decoding: {token}") from None

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes, for visualising a tokenisation.

        >>> enc.decode_tokens_bytes([15339, 1917])
        [b'hello', b' world']
        """
        return [self.decode_single_token_bytes(t) for t in _as_int_list(tokens)]

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
                     num_threads: int = 8) -> list[str]:
        """Decode a list of token lists.

        >>> enc.decode_batch([[15339], [1917]])
        ['hello', ' world']
        """
        return [self.decode(t, errors=errors) for t in batch]

    def decode_bytes_batch(self, batch: Sequence[Sequence[int]], *, num_threads: int = 8
                           ) -> list[bytes]:
        """Decode a list of token lists to bytes.

        >>> enc.decode_bytes_batch([[15339], [1917]])
        [b'hello', b' world']
        """
        return [self.decode_bytes(t) for t in batch]

    def stream_decoder(self, errors: str = "replace") -> "StreamDecoder":
        """A decoder for token streams that holds back an incomplete UTF-8 tail between calls.

        >>> dec = enc.stream_decoder()
        >>> dec.feed(enc.encode("h\\u00e9")[:1]) + dec.feed(enc.encode("h\\u00e9")[1:]) + dec.flush()
        'hé'
        """
        return StreamDecoder(self, errors)

    # ==== miscellaneous ==========================================================================

    @property
    def n_vocab(self) -> int:
        """Number of ids (``max_token_value + 1``)."""
        return self.max_token_value + 1

    @property
    def id_dtype(self) -> type:
        """numpy dtype of id arrays: uint16 when every id fits, else uint32."""
        return np.uint16 if self.max_token_value < (1 << 16) else np.uint32

    @property
    def eot_token(self) -> int:
        """The end-of-text special token's id.

        >>> enc.eot_token
        100257
        """
        for name in ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"):
            if name in self._special_tokens:
                return self._special_tokens[name]
        raise KeyError(f"{self.name} has no end-of-text special token "
                       f"(specials: {sorted(self._special_tokens)[:8]}...)")

    @functools.cached_property
    def special_tokens_set(self) -> set[str]:
        """The special tokens' strings."""
        return set(self._special_tokens)

    def is_special_token(self, token: int) -> bool:
        return token in self._special_token_values

    def token_byte_values(self) -> list[bytes]:
        """Every mergeable (non-special) token's bytes."""
        specials = self._special_token_values | set(self._plain_added.values())
        return [b for i, b in self._decoder.items() if i not in specials]

    @property
    def pat_str(self) -> "str | None":
        """The pre-tokenizer regex (``None`` for multi-step HF pre-tokenizers)."""
        return self._pat_str

    # ==== private ================================================================================

    @functools.cached_property
    def merge_table(self) -> MergeTable:
        """The merge table (built on first use: a few hundred ms for 200K vocabularies)."""
        return self._table_factory()

    @functools.cached_property
    def _ranks_digest(self) -> str:
        """A digest of the mergeable ranks: names the cached merge table (0.1 s vs 1-2 s)."""
        h = hashlib.sha256()
        for tok, rank in sorted(self._mergeable_ranks.items(), key=lambda kv: kv[1]):
            h.update(b"%d %d " % (rank, len(tok)) + tok)
        return h.hexdigest()[:32]

    @functools.cached_property
    def _token_ids_by_bytes(self) -> dict[bytes, int]:
        specials = self._special_token_values | set(self._plain_added.values())
        return {b: i for i, b in self._decoder.items() if i not in specials}

    def _special_args(self, allowed_special, disallowed_special):
        return normalize_special_args(self._special_tokens.keys(), allowed_special,
                                      disallowed_special)

    def _encode_segments(self, text: str, allowed: frozenset) -> list[int]:
        out: list[int] = []
        ids = self._special_tokens
        plain = self._plain_added
        for seg, is_tok in self._split_active(text, allowed | frozenset(plain)):
            if is_tok:
                out.append(ids[seg] if seg in ids else plain[seg])
            else:
                out.extend(self._encode_pieces(self._pretok.split(seg)))
        return out

    def _split_active(self, text: str, active: frozenset) -> list[tuple[str, bool]]:
        """``text`` cut at the active special/added tokens (with HF's lstrip/rstrip)."""
        parts = split_specials(text, active)
        if self._lstrip or self._rstrip:
            parts = strip_around(parts, self._lstrip, self._rstrip)
        return parts

    def _encode_pieces(self, pieces: list[str]) -> list[int]:
        cache = self._cache
        vals = list(map(cache.get, pieces))
        if None in vals:
            for i, v in enumerate(vals):
                if v is None:
                    vals[i] = self._encode_piece(pieces[i])
        return list(chain.from_iterable(vals))

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        data = piece.encode("utf-8")
        if len(data) >= LONG_PIECE:
            return tuple(merge_long(data, self.merge_table))  # not cached: rarely repeats
        if self._mergeable_ranks is not None:
            # tiktoken rule on a short piece: the byte-rank loop needs no merge table, so a
            # one-off encode() never pays the table build (~1-2 s for 200K vocabularies);
            # tests prove it equals the table-driven paths
            ids = tuple(bpe_tiktoken(data, self._mergeable_ranks))
        else:
            ids = tuple(merge_small(data, self.merge_table))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[piece] = ids
        return ids


class StreamDecoder(_RefStreamDecoder):
    """Incremental decoding for an Encoding (see ``Encoding.stream_decoder``)."""

    def __init__(self, encoding: Encoding, errors: str = "replace"):
        super().__init__(encoding.decode_single_token_bytes, errors)


def _as_int_list(tokens) -> list[int]:
    if isinstance(tokens, np.ndarray):
        return tokens.tolist()
    return tokens
