"""SentencePiece-style HF ``tokenizer.json`` (character-level BPE): the segmenter.

What transformers writes when it converts a SentencePiece BPE model (Llama 2, Mistral):
``model.type = "BPE"`` over characters with ``byte_fallback`` and ``fuse_unk``; spaces become "▁"
in the normaliser (``Prepend("▁")`` + ``Replace(" ", "▁")``) or in a ``Metaspace``
pre-tokenizer. ``cpu_ref/hf_spm.py`` is the spec (checked against HF); gputok computes:

    split       added tokens (``special`` ones under the allowed/disallowed contract)
    normaliser  ``normalizers.HFSteps``; pre-tokenizer ``Metaspace`` ("first" = the segment
                starts the document) or ``Whole``
    units       each word cut into exact spans (``charbpe``)
    segment     the HF rule on symbol ids (priority = merge index, merged id = vocab[a + b]);
                a span with a character outside the vocabulary starts from HF's own symbols
                (byte tokens, or unk ids fused within the word)

Cuts: a span boundary sits between two characters of the vocabulary that never stand side by
side inside a merge result. Next to a character outside the vocabulary there is no cut (its
byte tokens or unk could take part in merges, and unk fusion is per word), except when the
model has every ``<0xXX>`` token and no merge uses one: such a character is its byte tokens,
always. With ``ignore_merges`` a word that is a token is one id, so words are never cut.

HF's order quirk is kept (``initial_symbols``): a pending fused unk is flushed only by the next
character of the vocabulary or the end of the word, so byte tokens emitted meanwhile come out
before it.
"""

from __future__ import annotations

import numpy as np

from ..._arrays import unique_sorted
from . import Base
from .charbpe import CHUNK_DEVICE, UNKNOWN, CharBpe, code_points

SPACE = "\u2581"


class HFSpmFamily(Base):
    """The tables of one SPM-style tokenizer.json (built by ``loaders.hf_families``)."""

    name = "BPE (characters)"
    cuts = True
    device = CHUNK_DEVICE  # (kernels/encode_spm.cu: the HF rule's initial symbols, no expansion)

    def __init__(self, *, vocab: dict, merges: list, byte_fallback: bool, fuse_unk: bool,
                 unk_token: "str | None", ignore_merges: bool, where: str):
        self.vocab = vocab
        self.where = where
        self.byte_fallback = byte_fallback
        self.fuse_unk = fuse_unk
        self.unk_token = unk_token
        self.unk_id = vocab.get(unk_token) if unk_token is not None else None
        self.ignore_merges = ignore_merges
        byte_toks = [vocab.get(f"<0x{b:02X}>") for b in range(256)]
        self.byte_tok = byte_toks if byte_fallback else None
        pairs: dict[int, tuple[int, int]] = {}
        inner: set = set()
        byte_set = {i for i in byte_toks if i is not None}
        bytes_merge = False
        for k, (a, b) in enumerate(merges):
            ia, ib, im = vocab[a], vocab[b], vocab[a + b]
            pairs.setdefault(ia << 32 | ib, (k, im))  # the first occurrence of a pair wins
            inner.update(zip(a + b, (a + b)[1:]))
            bytes_merge |= ia in byte_set or ib in byte_set
        # a character outside the vocabulary is exactly its byte tokens: cut around it
        bytes_only = byte_fallback and None not in byte_toks and not bytes_merge
        chars = {t: i for t, i in vocab.items() if len(t) == 1}
        self.bpe = CharBpe(chars, pairs, inner, cut_unknown=bytes_only)
        self.no_cuts = ignore_merges

    # ---- the segmenter -------------------------------------------------------------------------

    def units(self, words: list) -> list:
        """Per segment, its words cut into exact spans (with ``ignore_merges`` a word that is a
        token is one id, so words are never cut)."""
        if self.no_cuts:
            return words
        flat = [w for ws in words for w in ws]
        spans = iter(self.bpe.segment(flat))
        return [[u for w in ws for u in next(spans)] for ws in words]

    def initial_symbols(self, span: str) -> list:
        """HF ``BPE::merge_word`` before merging (the order quirk: see the module docstring)."""
        vocab, out, unk = self.vocab, [], None
        for ch in span:
            i = vocab.get(ch)
            if i is not None:
                if unk is not None:
                    out.append(unk)
                    unk = None
                out.append(i)
                continue
            if self.byte_tok is not None:
                toks = [self.byte_tok[b] for b in ch.encode("utf-8")]
                if None not in toks:
                    out.extend(toks)
                    continue
            if self.unk_token is None:
                continue  # no unk token: HF drops the character
            if self.unk_id is None:
                raise ValueError(f"{self.where}: unk_token {self.unk_token!r} is not in the "
                                 "vocabulary")
            if unk is not None and not self.fuse_unk:
                out.append(unk)
            unk = self.unk_id
        if unk is not None:
            out.append(unk)
        return out

    def segment(self, spans: list) -> list:
        out: list = [None] * len(spans)
        todo = []
        if self.ignore_merges:
            get = self.vocab.get
            for i, s in enumerate(spans):
                t = get(s)
                if t is None:
                    todo.append(i)
                else:
                    out[i] = (t,)
        else:
            todo = list(range(len(spans)))
        if not todo:
            return out
        sub = [spans[i] for i in todo]
        lens = np.fromiter(map(len, sub), np.int64, len(sub))
        syms = self.bpe.sym_of[code_points("".join(sub))]
        unknown = syms >= UNKNOWN
        if unknown.any():  # spans with characters outside the vocabulary: HF's own symbols
            off = np.concatenate([[0], np.cumsum(lens)])
            bad = unique_sorted(np.searchsorted(off, np.flatnonzero(unknown), "right") - 1)
            parts, new_lens = [], lens.copy()
            sl, ol = syms.tolist(), off.tolist()
            bad_set = set(bad.tolist())
            for k in range(len(sub)):
                if k in bad_set:
                    init = self.initial_symbols(sub[k])
                    new_lens[k] = len(init)
                    parts.append(init)
                else:
                    parts.append(sl[ol[k]:ol[k + 1]])
            syms = np.fromiter((x for p in parts for x in p), np.uint32, int(new_lens.sum()))
            lens = new_lens
        offsets = np.zeros(len(sub) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        ids, off = self.bpe.merge_flat(syms, offsets)
        ids_l, off_l = ids.tolist(), off.tolist()
        for k, i in enumerate(todo):
            out[i] = tuple(ids_l[off_l[k]:off_l[k + 1]])
        return out

