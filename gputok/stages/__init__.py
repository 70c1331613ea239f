"""The batch pipeline, stage by stage (backend-neutral definitions + numpy implementations).

    pack    texts -> uint8 buffer + int64 document offsets          (pack.py)
    split   special tokens (only when allowed)  -> segments          (specials in encoding.py)
    pretok  regex pre-tokenization               -> pieces            (pretok.py)
    dedup   unique pieces + inverse index                             (dedup in merge.py)
    merge   BPE of every unique piece, table-driven                    (merge.py)
    emit    ids scattered into one ragged output + per-doc offsets    (emit.py)

GPU backends replace stages with kernels; every kernel is tested against the numpy stage here.
"""
