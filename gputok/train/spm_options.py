"""SentencePiece BPE training's settings (``SpmOptions``, TrainerSpec's names and defaults), the
normalisation rules it names, and the ids of its meta pieces (``cpu_ref/spm_train.py`` rule 10).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

SPACE = "\u2581"
UNK_CHAR = "\u2585"
BOUNDARY = "\u001f"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6


class SpmTrainError(ValueError):
    """Settings or a corpus sentencepiece's trainer refuses, with its reason."""


@dataclass
class SpmOptions:
    """The trainer's settings that change pieces, scores or ids (TrainerSpec's names and
    defaults; ``cpu_ref.spm_train.SpmOptions`` is the same)."""

    vocab_size: int = 8000
    character_coverage: float = 0.9995
    max_sentencepiece_length: int = 16
    max_sentence_length: int = 4192
    split_by_unicode_script: bool = True
    split_by_number: bool = True
    split_by_whitespace: bool = True
    split_digits: bool = False
    treat_whitespace_as_suffix: bool = False
    allow_whitespace_only_pieces: bool = False
    byte_fallback: bool = False
    required_chars: str = ""
    control_symbols: list = field(default_factory=list)
    user_defined_symbols: list = field(default_factory=list)
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = -1
    unk_piece: str = "<unk>"
    bos_piece: str = "<s>"
    eos_piece: str = "</s>"
    pad_piece: str = "<pad>"
    hard_vocab_limit: bool = True
    normalization_rule_name: str = "nmt_nfkc"
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True


@lru_cache(maxsize=None)
def charsmap_blob(name: str) -> bytes:
    if name == "identity":
        return b""
    if name == "nmt_nfkc":
        raw = (resources.files("gputok") / "data" / "spm_nmt_nfkc.charsmap.gz").read_bytes()
        return gzip.decompress(raw)
    raise SpmTrainError(f"normalization_rule_name {name!r}: nmt_nfkc and identity are known")


def meta_pieces(o: SpmOptions) -> dict[int, tuple[str, int]]:
    """Rule 10's ids of the meta pieces: ``{id: (piece, type)}``."""
    meta: dict[int, tuple[str, int]] = {}
    for i, p in ((o.unk_id, o.unk_piece), (o.bos_id, o.bos_piece), (o.eos_id, o.eos_piece),
                 (o.pad_id, o.pad_piece)):
        if i < 0:
            continue
        if i >= o.vocab_size or i in meta:
            raise SpmTrainError(f"id {i} of {p!r} is taken or outside the vocabulary")
        meta[i] = (p, UNKNOWN if p == o.unk_piece else CONTROL)
    if o.unk_id < 0 and not o.byte_fallback:
        raise SpmTrainError(f"{o.unk_piece} must be defined")
    seen: set = set()
    nxt = 0
    extra = [(w, CONTROL) for w in o.control_symbols] + \
        [(w, USER_DEFINED) for w in o.user_defined_symbols] + \
        ([(f"<0x{b:02X}>", BYTE) for b in range(256)] if o.byte_fallback else [])
    for w, kind in extra:
        if w in seen:
            raise SpmTrainError(f"{w} is already defined. duplicated symbols are not allowed.")
        if w == o.unk_piece:
            raise SpmTrainError(f"{o.unk_piece} must not be defined with --control_symbols and "
                                "--user_defined_symbols.")
        seen.add(w)
        special = [i for i, p in ((o.bos_id, o.bos_piece), (o.eos_id, o.eos_piece),
                                  (o.pad_id, o.pad_piece)) if w == p and i >= 0]
        if special:
            meta[special[0]] = (w, kind)
            continue
        while nxt in meta:
            nxt += 1
        meta[nxt] = (w, kind)
    return meta
