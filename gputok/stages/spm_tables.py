"""SentencePiece BPE on a device: the tables and constants of ``kernels/encode_spm.cu``.

A model whose segmenter is SentencePiece BPE (a ``.model``: ``segmenters.spm_bpe.SpmFamily``
with ``normalizers.SpmNormalizer``) or character BPE (an SPM-style tokenizer.json:
``segmenters.hf_charbpe.HFSpmFamily`` with ``HFSteps`` and ``Metaspace`` or ``Whole``) becomes
the arrays the kernels read (``kernels/common/spm_rules.h`` says what each means) and a plan of
what the host does before them:

* ``normalizer = "device"``: the identity normaliser (Mistral, Llama 2, their tokenizer.json
  conversions: spaces escaped as "▁", a dummy "▁" in front) is read by the kernels themselves,
  ``" "`` as ``"▁"`` (``ESCAPE``) and the dummy from a mark on the segment's first byte
  (``DUMMY``); the host only says which segments get one (``dummy``: "all", "first" for HF's
  Metaspace ``prepend_scheme="first"``, "none"; Metaspace skips a segment that starts with a
  space or "▁": ``dummy_unless_blank``);
* ``normalizer = "rewrite"``: any other SentencePiece normaliser (a charsmap: botchan's and
  every ``spm_train`` default's nmt_nfkc; collapsed whitespace; whitespace as suffix) rewrites
  the chunk on the device first (THE SPM NORMALISER, ``kernels/common/spm_norm_rules.h``), and
  the kernels read the normalised text as it is. User-defined pieces, which the normaliser
  matches before any rule (THE USER-DEFINED MATCH, their trie ``ud_trie``), are taken by the
  native CPU's normaliser only (``kernels/host_spm.h``); the CUDA and Metal kernels have no
  trie argument, so there such a model normalises on the host (``runners/spm.py``, counted);
* ``normalizer = "host"``: the same on the host, segment by segment, for what the device
  normaliser does not take (HF normalisers other than Prepend/Replace of "▁").

The tables are built from a model's components by ``backends/spm_tables.py``, which also says
why a device cannot run a model at all.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from .marks import SEG_START
from .table import MergeTable, merge_slots

UNKNOWN = 0x80000000  # symbol of a character no merge involves: UNKNOWN | code point
CP_MASK = 0x1FFFFF

NO_ID = 0xFFFFFFFF  # no unk piece / no byte token
# the normaliser's flags (kernels/common/spm_norm_rules.h)
NORM_DUMMY, NORM_COLLAPSE, NORM_ESCAPE, NORM_SUFFIX = 1, 2, 4, 8
DUMMY = 16  # mark bit: the segment starting here starts with a virtual "▁"
# flags of the model (kernels/common/spm_rules.h)
ESCAPE, HF, BYTE_FALLBACK, FUSE_UNK, CUT_UNKNOWN, SPLIT = 1, 2, 4, 8, 16, 32
SPACE_CP = 0x2581

#: the defines the kernels share with this module (gputok/backends/kernels.py)
KERNEL_CONSTANTS = {
    "ENC_SPM_UNKNOWN": UNKNOWN, "ENC_SPM_CP_MASK": CP_MASK, "ENC_SPM_NO_ID": NO_ID,
    "ENC_SPM_DUMMY": DUMMY, "ENC_SPM_ESCAPE": ESCAPE, "ENC_SPM_HF": HF,
    "ENC_SPM_BYTE_FALLBACK": BYTE_FALLBACK, "ENC_SPM_FUSE_UNK": FUSE_UNK,
    "ENC_SPM_CUT_UNKNOWN": CUT_UNKNOWN, "ENC_SPM_SPLIT": SPLIT,
    "ENC_NORM_DUMMY": NORM_DUMMY, "ENC_NORM_COLLAPSE": NORM_COLLAPSE,
    "ENC_NORM_ESCAPE": NORM_ESCAPE, "ENC_NORM_SUFFIX": NORM_SUFFIX, "ENC_CM_MAX_RESULTS": 32,
}


@dataclass(eq=False)
class SpmTables:
    """One model's device tables (host arrays) and its host plan (see the module docstring)."""

    sym: np.ndarray  # uint32[0x110000]: symbol of every code point
    pairs: MergeTable  # symbol pairs -> (priority, merged symbol)
    cut_keys: np.ndarray  # uint64: cp_a << 32 | cp_b of every inner character pair
    cuts: MergeTable  # the same as a hash set (THE PAIR PROBE's layout)
    fin: np.ndarray  # uint32[symbols]: emitted id, or UNKNOWN | code point
    byte_ids: np.ndarray  # uint32[256]: byte piece of each byte, NO_ID where none
    flags: int
    unk: int
    space_id: int
    normalizer: str  # "device" (read as the kernels go) | "rewrite" (kernels) | "host"
    dummy: str  # "all" | "first" | "none" (device normaliser)
    dummy_unless_blank: bool  # no dummy for a segment starting with " " or "▁" (Metaspace)
    hf: bool
    fuse: bool  # THE UNK RUN across spans (SentencePiece without byte fallback)
    user_defined: "dict | None" = None  # SentencePiece's user-defined pieces (text -> id)
    ud_set: frozenset = frozenset()
    # the normaliser that rewrites a chunk (normalizer "rewrite"): the charsmap's double array
    # and string block (empty: none), and its flags
    cm_units: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))
    cm_strings: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    nflags: int = 0
    ud_trie: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))

    @functools.cached_property
    def text_bits(self) -> int:
        """The mark of a single text's one segment (``spm_plan.marks`` of one document; with
        ``dummy_unless_blank`` the caller drops the dummy for a text that starts blank)."""
        return SEG_START | (DUMMY if self.normalizer == "device" and self.dummy != "none"
                            else 0)

    def arrays(self) -> dict:
        """The arrays a device uploads: symbol table, cut set and pair table slots, final ids,
        byte pieces."""
        return {"sym": self.sym, "c_slots": merge_slots(self.cuts),
                "t_slots": merge_slots(self.pairs), "fin": self.fin, "byte_ids": self.byte_ids,
                "cm_units": self.cm_units if len(self.cm_units) else np.zeros(1, np.uint32),
                "cm_strings": self.cm_strings if len(self.cm_strings) else np.zeros(1, np.uint8),
                "ud": self.ud_trie if len(self.ud_trie) else np.zeros(1, np.uint32)}

    def scalars(self) -> dict:
        u32 = np.uint32
        return {"c_bits": u32(self.cuts.hash_bits), "t_bits": u32(self.pairs.hash_bits),
                "flags": u32(self.flags), "unk": u32(self.unk), "space_id": u32(self.space_id),
                "n_units": u32(len(self.cm_units)), "n_strings": u32(len(self.cm_strings)),
                "nflags": u32(self.nflags), "n_ud": u32(len(self.ud_trie))}


def ud_trie(pieces: dict) -> np.ndarray:
    """THE USER-DEFINED MATCH's trie of ``pieces`` (text -> id) as the kernels read it
    (``kernels/common/spm_norm_rules.h``: 8 words of first-byte bits, then node k at
    [8 + 3k, 8 + 3k + 3) = first edge, edge count, 1 + id or 0; edges ``byte << 24 | child``,
    sorted by byte).

    >>> ud_trie({"ab": 7, "a": 3}).tolist()[3:]
    [2, 0, 0, 0, 0, 17, 1, 0, 18, 1, 4, 19, 0, 8, 1627389953, 1644167170]
    """
    children: list = [{}]
    ends = [0]
    for text, i in pieces.items():
        node = 0
        for b in text.encode("utf-8"):
            nxt = children[node].get(b)
            if nxt is None:
                nxt = children[node][b] = len(children)
                children.append({})
                ends.append(0)
            node = nxt
        ends[node] = i + 1
    n = len(children)
    if n >= 1 << 24:
        raise ValueError(f"{n} trie nodes for the user-defined pieces: at most {1 << 24} fit")
    # the first bytes' bits, 3 words a node, one edge into each node but the root
    out = np.zeros(8 + 4 * n - 1, np.uint32)
    for b in children[0]:
        out[b >> 5] |= np.uint32(1 << (b & 31))
    e = 8 + 3 * n
    for k, ch in enumerate(children):
        out[8 + 3 * k:8 + 3 * k + 3] = e, len(ch), ends[k]
        for b in sorted(ch):
            out[e] = b << 24 | ch[b]
            e += 1
    return out
