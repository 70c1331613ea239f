"""The two literal BPE algorithms gputok must reproduce, written as plainly as possible.

Both start a piece (the bytes of one pre-tokenizer match) as single bytes and repeatedly merge one
adjacent pair until no pair can be merged. They differ only in *which* pairs may merge and how a
pair is ranked:

* tiktoken rule: a pair may merge when the concatenation of its bytes is a token; its priority is
  that token's rank, and the token's id *is* its rank. Before any merging, a piece whose bytes are
  a token is emitted whole.
* HF rule: a pair ``(a, b)`` may merge when it appears in the ``merges`` list; its priority is its
  index there; the merged token's id is ``vocab[a + b]``. The whole-piece lookup happens only when
  the model says ``ignore_merges``.

Ties (equal priority, which happens when the same pair occurs twice, e.g. ``"\\t" * 32``) go to the
leftmost pair. After each merge the pairs are re-evaluated from scratch: a merge can create a new,
better pair with its neighbour, which is why BPE cannot merge "all pairs of the best rank" at once.

gputok's fast paths use a single *merge table* ``(left_id, right_id) -> (priority, merged_id)``
built from either rule; tests prove the table-driven merge equals these functions.
"""

from __future__ import annotations


def bpe_tiktoken(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """Encode one piece with the tiktoken rule. Quadratic, and that's fine for a spec."""
    if piece in ranks:
        return [ranks[piece]]
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best_rank, best_i = None, None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            # strict "<" keeps the leftmost of equal ranks
            if rank is not None and (best_rank is None or rank < best_rank):
                best_rank, best_i = rank, i
        if best_i is None:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    # every single byte is a token in byte-level vocabularies; a missing one is a broken vocab
    return [ranks[p] for p in parts]


def bpe_hf(
    symbols: list[str],
    vocab: dict[str, int],
    merge_rank: dict[tuple[str, str], int],
    *,
    ignore_merges: bool = False,
) -> list[int]:
    """Encode one word (already mapped to byte-level unicode symbols) with the HF rule.

    ``symbols`` are the initial symbols (one per byte for byte-level BPE, each in ``vocab``:
    ``hf.RefHF.symbols`` says what becomes of a byte the vocabulary lacks); ``merge_rank`` maps
    a pair of symbol strings to its index in the ``merges`` list.
    """
    word = "".join(symbols)
    if ignore_merges and word in vocab:
        return [vocab[word]]
    parts = list(symbols)
    while len(parts) > 1:
        best_rank, best_i = None, None
        for i in range(len(parts) - 1):
            rank = merge_rank.get((parts[i], parts[i + 1]))
            if rank is not None and (best_rank is None or rank < best_rank):
                best_rank, best_i = rank, i
        if best_i is None:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return [vocab[p] for p in parts]
