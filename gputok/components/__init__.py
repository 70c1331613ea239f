"""The components a ``Model`` is made of, and how to add a tokenizer family.

A model is a composition, as HF ``tokenizers`` composes a tokenizer (one folder per kind):

    normaliser      normalizers/     segment text -> text          Unicode steps (NFC, NFKC,
                                                                   Lowercase), SentencePiece's
                                                                   charsmap, HF Prepend/Replace,
                                                                   BERT's
    pre-tokenizer   pretokenizers/   text -> words                 one regex (``stages.pretok``),
                                                                   the whole text, Metaspace,
                                                                   BERT's, Whitespace(Split)
    segmenter       segmenters/      words -> ids                  byte-level BPE (tiktoken and
                                                                   HF rules), SentencePiece BPE,
                                                                   character BPE (SPM-style HF
                                                                   files), WordPiece, Unigram,
                                                                   WordLevel
    post-processor  postprocessors/  ids -> ids with specials      none, HF templates, BOS/EOS
    decoder         decoders/        ids -> text                   joined bytes, sentencepiece's,
                                                                   HF decoder chains

The pipeline (``stages``, ``backends``) runs any composition: split at special/added tokens ->
normaliser -> pre-tokenizer -> the segmenter's exact cuts (``units``) -> piece cache ->
``segment`` -> emit -> ``finish``. It asks components only what the protocols below declare,
never which family a model is.

**Numpy form and device form.** Every component has its numpy form (the methods below). A
segmenter may also have a device form (``Segmenter.device``, a ``SegmenterDevice``): the device
stage that runs it, the kernel a device needs for it and the tables it uploads. Today byte-level
BPE (the merge kernels), WordPiece (``encode_wordpiece``) and SentencePiece BPE, ``.model`` and
SPM-style tokenizer.json (``encode_spm.cu``: a whole chunk, its cuts and normaliser too) have
one; a segmenter without one runs on the host on every backend, a counted fallback. A
pre-tokenizer runs on the device when it is one regex of a scanner family the pretok kernels
implement (``pattern``, ``scanner``); a normaliser of one Unicode normal form has the device's
quick check (``device_form``).

**Adding a family** = its components + its loader:

1. the rules in ``cpu_ref/`` first, tested against the family's own library;
2. a segmenter module in ``segmenters/`` implementing ``Segmenter`` (and any normaliser,
   pre-tokenizer or decoder it needs that is not here yet, each in its folder);
3. a loader in ``gputok/loaders/`` that reads the file and builds
   ``Model(name=..., decoder=..., byte_ids=..., segmenter=..., normalizer=..., pretokenizer=...,
   post=..., detok=...)``. Loaders are the only place that reads a file's kind;
4. optionally a device form: a ``SegmenterDevice`` on the segmenter, a device stage in
   ``backends/device_stages.py`` and its kernel. Nothing else changes;
5. its parity tests against the family's library (``tests/test_parity_families.py``,
   ``tests/test_real_vocabs.py`` for real files) and its rows in ``tests/test_backend_matrix.py``.

Components import the stages and the pinned Unicode data, never the backends or the loaders
(``tests/test_layers.py``).

``tests/test_components.py`` checks that every component class implements its protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

__all__ = ["Normalizer", "PreTokenizer", "Segmenter", "SegmenterDevice", "PostProcessor",
           "Decoder"]


@runtime_checkable
class Normalizer(Protocol):
    """Text -> text, one segment at a time (a segment: text between special/added tokens).

    ``bool(n)`` is False for a normaliser that changes nothing; ``steps`` is the tuple of
    Unicode steps (``stages.normalize``) when the normaliser is exactly that, which the device
    path runs on its host spans, else None; ``device_form`` the one normal form whose quick
    check runs on the device, else None."""

    steps: "tuple | None"

    def normalize(self, text: str) -> str: ...

    def normalize_batch(self, texts: list) -> list: ...


@runtime_checkable
class PreTokenizer(Protocol):
    """Normalised text -> words (str), which the segmenter never merges across.

    ``uses_first``: the result depends on whether the segment starts its document (``first``:
    Metaspace's "first" scheme); ``pattern``/``scanner``: the one regex and its vectorised
    scanner when the pre-tokenizer is exactly that (the device's pretok kernels run scanner
    families), else None; ``fuse(normalizer)``: a pre-tokenizer that runs ``normalizer`` in its
    own pass (BERT's, over code points), or None."""

    name: str
    uses_first: bool
    pattern: "str | None"

    @property
    def scanner(self): ...

    def split(self, text: str) -> list: ...

    def split_batch(self, texts: list, first=None) -> list: ...

    def fuse(self, normalizer) -> "PreTokenizer | None": ...


@dataclass(frozen=True)
class SegmenterDevice:
    """A segmenter's device form: ``stage`` is the ``DeviceStages`` method that runs it on a
    chunk's pieces, or ``"chunk"``: it runs a whole chunk itself (its own cuts and normaliser:
    SentencePiece BPE, ``backends/runners/spm.py``); ``kernel`` the kernel a device must have
    (``has_kernel``); ``one_call``: the device's one-call forms (a short text, an inline chunk,
    the merge of given pieces) run it too; ``tables()``: (host arrays, kernel scalars) to upload
    (an array given as a ``stages.table.MergeTable`` is uploaded in the merge table's hash
    layout), or None for the merge tables of ``backends/device_tables.py`` (byte-level BPE,
    cached on disk)."""

    stage: str
    kernel: str
    one_call: bool
    tables: "Callable[[], tuple[dict, dict]] | None" = None


@runtime_checkable
class Segmenter(Protocol):
    """Words -> ids: the vocabulary's own rule (BPE, Unigram, WordPiece, WordLevel).

    ``name`` (for messages), ``device`` (a ``SegmenterDevice`` or None), ``byte_level`` (ids
    are byte-level BPE over a merge table: ranks or merges, exportable), ``cuts`` (``units``
    cuts words into smaller exact units: pieces the cache and ``segment`` see), and:

    * ``units(words_per_segment)``: per segment, its units (a word is cut only where no rule
      of the segmenter can cross; SentencePiece: a sentence into spans);
    * ``segment(units)``: the ids (tuples) of distinct units, aligned with them;
    * ``finish(ids, offsets)`` / ``finish_list(ids)``: the batch's / one document's last rule
      (SentencePiece fuses runs of unk ids there); unchanged for most;
    * ``token_id(text)``: the id of one unit as the vocabulary spells it ("▁the", "##ing"),
      or None."""

    name: str
    device: "SegmenterDevice | None"
    byte_level: bool
    cuts: bool

    def units(self, words: list) -> list: ...

    def segment(self, units: list) -> list: ...

    def finish(self, ids, offsets): ...

    def finish_list(self, ids: list) -> list: ...

    def token_id(self, text: str) -> "int | None": ...


@runtime_checkable
class PostProcessor(Protocol):
    """Ids of one encoded text -> with the model's special tokens added (HF's post-processor,
    sentencepiece's / llama.cpp's BOS and EOS); applied only when asked
    (``add_special_tokens=True``). ``apply_arrays``: the same on a ragged batch."""

    def apply(self, ids: list) -> list: ...

    def apply_arrays(self, ids, offsets): ...


@runtime_checkable
class Decoder(Protocol):
    """Ids -> text as the family's library decodes them; ``stream(errors)``: an incremental
    decoder (``feed(ids) -> str``, ``flush() -> str``)."""

    def decode(self, tokens, errors: str = "replace") -> str: ...

    def decode_bytes(self, tokens) -> bytes: ...

    def stream(self, errors: str = "replace"): ...
