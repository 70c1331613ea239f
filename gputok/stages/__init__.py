"""The encode pipeline, stage by stage: what each stage computes, and its numpy implementation.

Every stage reads the ``Model`` (never the ``Encoding``) and one batch; backends compose them
(``gputok.backends``), and a device backend replaces a stage with kernels where it has them:

    stage      module        numpy implementation                   device (kernels/)
    pack       pack.py       texts -> Documents (str or packed UTF-8) host
    split      split.py      special/added tokens -> segments       host (buffer form)
    normalize  normalize.py  HF normalisers (quick check + spans)   encode_nfc.cu (the quick
                                                                    check; flagged spans: host)
    pretok     pretok.py     regex / vectorised scanner -> pieces    encode_pretok.cu,
               scan*.py      the scanner (the kernels' specification) encode_o200k.cu
    dedup      dedup.py      piece cache: one merge per distinct piece encode_merge.cu (native;
                                                                    CUDA with ``dedup=True``)
    merge      merge.py      table-driven BPE (rounds, heap, scalar) encode_merge.cu
               table.py      the merge table (dict + hash arrays)
    emit       emit.py       ids + per-document offsets             encode_scan.cu, encode_emit.cu
               lists.py      ids as Python lists (``encode``'s result)

What differs between tokenizer families (normaliser, pre-tokenizer, segmenter, post-processor,
decoder) is a component of the model (``gputok.components``); the stages ask the components,
never the family. Of the segmenters, byte-level BPE (the merge kernels) and WordPiece
(encode_wordpiece.cu) have a device form; the others run on the host on every backend.

``counters`` counts which implementation did the work (pieces merged in vectorised rounds, by
the heap, ...), so tests can assert that the path they mean to test really ran.
"""

from __future__ import annotations

from collections import Counter

#: work done per implementation, e.g. ``counters["merge.rounds"]`` pieces; see reset_counters
counters: Counter = Counter()


def reset_counters() -> None:
    """Zero ``counters`` (tests do this before asserting which path ran)."""
    counters.clear()
