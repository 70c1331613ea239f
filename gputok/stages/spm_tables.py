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
  the kernels read the normalised text as it is;
* ``normalizer = "host"``: the same on the host, segment by segment, for what the device
  normaliser does not take (HF normalisers other than Prepend/Replace of "▁"; SentencePiece
  user-defined pieces, which it matches before any rule).

``spm_tables`` returns the reason instead where the device cannot run a model at all (its host
stages run it, a counted fallback): UNUSED pieces that merges make (their split-back map is
sentence-wide), HF's ``ignore_merges`` (whole-word lookup), an unk token missing from the
vocabulary, a "▁" that is not one emitted piece while the kernels read spaces as it.
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..components.segmenters.charbpe import UNKNOWN, CP_MASK
from .table import MergeTable

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

    @functools.cached_property
    def ud_search(self):
        """The user-defined pieces' search in a str (``specials.token_regex``), or None."""
        from ..specials import token_regex

        return token_regex(self.ud_set) if self.ud_set else None

    @functools.cached_property
    def text_bits(self) -> int:
        """The mark of a single text's one segment (``spm_plan.marks`` of one document; with
        ``dummy_unless_blank`` the caller drops the dummy for a text that starts blank)."""
        from ..backends.hostplan import SEG_START

        return SEG_START | (DUMMY if self.normalizer == "device" and self.dummy != "none"
                            else 0)

    def arrays(self) -> dict:
        """The arrays a device uploads: symbol table, cut set and pair table slots, final ids,
        byte pieces."""
        from ..backends.device_tables import merge_slots

        return {"sym": self.sym, "c_slots": merge_slots(self.cuts),
                "t_slots": merge_slots(self.pairs), "fin": self.fin, "byte_ids": self.byte_ids,
                "cm_units": self.cm_units if len(self.cm_units) else np.zeros(1, np.uint32),
                "cm_strings": self.cm_strings if len(self.cm_strings) else np.zeros(1, np.uint8)}

    def scalars(self) -> dict:
        u32 = np.uint32
        return {"c_bits": u32(self.cuts.hash_bits), "t_bits": u32(self.pairs.hash_bits),
                "flags": u32(self.flags), "unk": u32(self.unk), "space_id": u32(self.space_id),
                "n_units": u32(len(self.cm_units)), "n_strings": u32(len(self.cm_strings)),
                "nflags": u32(self.nflags)}


_built: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_built_lock = threading.Lock()


def spm_tables(model) -> "SpmTables | str":
    """The device tables of a SentencePiece model (its segmenter, normaliser and
    pre-tokenizer), or why the device cannot run it (built once per model: every device
    uploads the same host arrays)."""
    with _built_lock:
        got = _built.get(model)
        if got is None:
            from ..components.segmenters.hf_charbpe import HFSpmFamily

            got = (_hf_tables(model) if isinstance(model.segmenter, HFSpmFamily)
                   else _spm_tables(model.segmenter, model.normalizer))
            _built[model] = got
    return got


def _spm_tables(fam, norm) -> "SpmTables | str":
    if fam.sentence_wide:
        return ("UNUSED pieces that merges make are split back by a sentence-wide map: the "
                "sentence runs on the host")
    device_norm = norm.charsmap is None and not norm.collapse and not norm.suffix
    sym = fam.bpe.sym_of
    ok = fam.emittable
    fin = np.full(len(ok), UNKNOWN | 0xFFFD, np.uint32)
    fin[ok] = np.flatnonzero(ok).astype(np.uint32)
    # a character no piece emits (a single-character piece, an extra symbol): expanded
    one, cps = fam.table.single_chars()
    off = ~ok[one]
    fin[one[off]] = np.uint32(UNKNOWN) | cps[off]
    extra = fam.extra_cps
    fin[fam.n_vocab:] = np.uint32(UNKNOWN) | extra
    space_id = NO_ID
    if device_norm:
        if fam.user_defined and any(" " in u or "\u2581" in u for u in fam.user_defined):
            device_norm = False  # (matched on the raw text: no space may be in them)
        else:
            dummy_cp = SPACE_CP if norm.space == "\u2581" else 0x20
            s = int(sym[dummy_cp])
            if s >= UNKNOWN or not ok[s]:
                return (f"{'▁' if dummy_cp == SPACE_CP else 'a space'} is not a piece: the "
                        "normaliser's spaces would become several ids")
            space_id = s
    rewrite = not device_norm and not fam.user_defined
    cm_units, cm_strings, nflags = np.zeros(0, np.uint32), np.zeros(0, np.uint8), 0
    if rewrite:  # THE SPM NORMALISER rewrites the chunk on the device
        if norm.charsmap is not None:
            cm_units = norm.charsmap.units
            cm_strings = np.frombuffer(norm.charsmap.strings, np.uint8)
        nflags = ((NORM_DUMMY if norm.dummy else 0) | (NORM_COLLAPSE if norm.collapse else 0)
                  | (NORM_ESCAPE if norm.space == "\u2581" else 0)
                  | (NORM_SUFFIX if norm.suffix else 0))
    flags = CUT_UNKNOWN
    if device_norm and norm.space == "\u2581":
        flags |= ESCAPE
    if fam.byte_fallback:
        flags |= BYTE_FALLBACK
        byte_ids = np.asarray(fam.byte_ids, np.uint32)
    else:
        flags |= FUSE_UNK
        byte_ids = np.full(256, NO_ID, np.uint32)
    cuts = fam.bpe.cut_table
    return SpmTables(sym=sym, pairs=fam.bpe.table, cut_keys=cuts.pair_keys, cuts=cuts, fin=fin,
                     byte_ids=byte_ids, flags=flags,
                     unk=fam.unk_id if fam.unk_id >= 0 else NO_ID, space_id=space_id,
                     normalizer="device" if device_norm else "rewrite" if rewrite else "host",
                     dummy="all" if device_norm and norm.dummy else "none",
                     dummy_unless_blank=False, hf=False, fuse=not fam.byte_fallback,
                     user_defined=fam.user_defined or None, ud_set=frozenset(fam.user_defined),
                     cm_units=cm_units, cm_strings=cm_strings, nflags=nflags)


def _hf_norm_plan(norm, pre) -> "tuple[str, bool] | None":
    """(dummy, escape) when the kernels can read the normaliser and Metaspace themselves."""
    from ..components.pretokenizers import Metaspace, Whole

    steps = tuple(getattr(norm, "items", ())) if norm else ()
    prepend, replace = ("prepend", "\u2581"), ("replace", " ", "\u2581")
    if isinstance(pre, Metaspace):
        if steps or pre.replacement != "\u2581":
            return None
        return {"always": "all", "first": "first", "never": "none"}[pre.scheme], True
    if not isinstance(pre, Whole):
        return None
    if steps in ((prepend, replace), (replace, prepend)):
        return "all", True
    if steps == (replace,):
        return "none", True
    if steps == ():
        return "none", False
    return None


def _hf_tables(model) -> "SpmTables | str":
    from ..components.pretokenizers import Metaspace, Whole

    fam, pre = model.segmenter, model.pretokenizer
    if fam.no_cuts:
        return "ignore_merges looks whole words up first: the words run on the host"
    if fam.unk_token is not None and fam.unk_id is None:
        return f"unk_token {fam.unk_token!r} is not in the vocabulary"
    if not isinstance(pre, (Metaspace, Whole)):
        return f"its pre-tokenizer ({pre.name}) has no device form"
    ms = pre if isinstance(pre, Metaspace) else None
    if ms is not None and ms.split_words and ms.replacement != "\u2581":
        return f"Metaspace splits at {ms.replacement!r}: the kernels cut before '▁' only"
    plan = _hf_norm_plan(model.normalizer, pre)
    sym = fam.bpe.sym_of
    if plan is not None and plan[1] and sym[SPACE_CP] >= UNKNOWN:
        return "'▁' is not in the vocabulary: the normaliser's spaces would become several ids"
    flags = HF
    if plan is not None and plan[1]:
        flags |= ESCAPE
    if fam.byte_tok is not None:
        flags |= BYTE_FALLBACK
        byte_ids = np.array([NO_ID if t is None else t for t in fam.byte_tok], np.uint32)
    else:
        byte_ids = np.full(256, NO_ID, np.uint32)
    if fam.fuse_unk:
        flags |= FUSE_UNK
    if fam.bpe.cut_unknown:
        flags |= CUT_UNKNOWN
    if ms is not None and ms.split_words:
        flags |= SPLIT
    cuts = fam.bpe.cut_table
    return SpmTables(sym=sym, pairs=fam.bpe.table, cut_keys=cuts.pair_keys, cuts=cuts,
                     fin=np.zeros(1, np.uint32), byte_ids=byte_ids, flags=flags,
                     unk=NO_ID if fam.unk_token is None else fam.unk_id,
                     space_id=int(sym[SPACE_CP]) if plan is not None and plan[1] else NO_ID,
                     normalizer="host" if plan is None else "device",
                     dummy="none" if plan is None else plan[0],
                     dummy_unless_blank=ms is not None, hf=True, fuse=False)
