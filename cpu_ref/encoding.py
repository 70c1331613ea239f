"""A reference Encoding: the tiktoken pipeline, one string at a time.

    text --fix_surrogates--> str --split at allowed specials--> segments
         --regex--> pieces --UTF-8--> bytes --BPE--> ids

It mirrors tiktoken's ``Encoding`` methods that define behaviour (encode, encode_ordinary,
decode_*), built on the other cpu_ref modules. It is a spec, not a product: slow and obvious.
"""

from __future__ import annotations

from . import bpe, decode as _decode, patterns, specials


class RefEncoding:
    def __init__(self, name: str, *, pat_str: str, mergeable_ranks: dict[bytes, int],
                 special_tokens: dict[str, int]):
        self.name = name
        self.pat_str = pat_str
        self.mergeable_ranks = mergeable_ranks
        self.special_tokens = special_tokens
        self._decoder = {r: b for b, r in mergeable_ranks.items()}
        self._decoder.update({i: s.encode("utf-8") for s, i in special_tokens.items()})

    # -- encoding -----------------------------------------------------------------------------

    def encode_piece_bytes(self, piece: bytes) -> list[int]:
        return bpe.bpe_tiktoken(piece, self.mergeable_ranks)

    def encode_ordinary(self, text: str) -> list[int]:
        text = specials.fix_surrogates(text)
        out: list[int] = []
        for piece in patterns.split(self.pat_str, text):
            out.extend(self.encode_piece_bytes(piece.encode("utf-8")))
        return out

    def encode(self, text: str, *, allowed_special="none", disallowed_special="all") -> list[int]:
        allowed, disallowed = specials.normalize_special_args(
            self.special_tokens.keys(), () if allowed_special == "none" else allowed_special,
            disallowed_special)
        # the check runs on the text as given, before surrogates are repaired (as tiktoken does)
        specials.check_disallowed(text, disallowed)
        text = specials.fix_surrogates(text)
        out: list[int] = []
        for segment, is_special in specials.split_specials(text, allowed):
            if is_special:
                out.append(self.special_tokens[segment])
            else:
                out.extend(self.encode_ordinary(segment))
        return out

    # -- decoding -----------------------------------------------------------------------------

    def decode_single_token_bytes(self, token: int) -> bytes:
        return self._decoder[token]

    def decode_bytes(self, tokens) -> bytes:
        return _decode.decode_bytes(tokens, self.decode_single_token_bytes)

    def decode(self, tokens, errors: str = "replace") -> str:
        return _decode.decode(tokens, self.decode_single_token_bytes, errors)
