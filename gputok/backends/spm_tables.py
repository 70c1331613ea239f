"""A model's SentencePiece device tables (``stages/spm_tables.SpmTables``), built from its
components: a ``.model``'s segmenter (``segmenters.spm_bpe.SpmFamily``) with its
``normalizers.SpmNormalizer``, or an SPM-style tokenizer.json's
(``segmenters.hf_charbpe.HFSpmFamily`` with ``HFSteps`` and ``Metaspace`` or ``Whole``).

``spm_tables`` returns the reason instead where the device cannot run a model at all (its host
stages run it, a counted fallback): UNUSED pieces that merges make (their split-back map is
sentence-wide), HF's ``ignore_merges`` (whole-word lookup), an unk token missing from the
vocabulary, a "▁" that is not one emitted piece while the kernels read spaces as it.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from ..stages.spm_tables import (BYTE_FALLBACK, CUT_UNKNOWN, ESCAPE, FUSE_UNK, HF, NO_ID,
                                 NORM_COLLAPSE, NORM_DUMMY, NORM_ESCAPE, NORM_SUFFIX, SPACE_CP,
                                 SPLIT, UNKNOWN, SpmTables, ud_trie)

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
    rewrite = not device_norm
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
                     normalizer="device" if device_norm else "rewrite",
                     dummy="all" if device_norm and norm.dummy else "none",
                     dummy_unless_blank=False, hf=False, fuse=not fam.byte_fallback,
                     user_defined=fam.user_defined or None, ud_set=frozenset(fam.user_defined),
                     cm_units=cm_units, cm_strings=cm_strings, nflags=nflags,
                     ud_trie=ud_trie(fam.user_defined) if fam.user_defined else
                     np.zeros(0, np.uint32))


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
