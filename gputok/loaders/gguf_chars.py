"""GGUF vocabularies whose BPE runs on characters: ``tokenizer.ggml.model = "gemma4"`` (Gemma 4),
and ``gpt2`` files whose ``tokenizer.ggml.pre`` is ``gemma4``, ``granite-embed-multi-311m`` or
``sarvam-moe``.

llama.cpp's rule (``cpu_ref.gguf.RefCharBpe`` states it): spaces become "▁"; the text splits into
runs of newlines and runs of other characters; a newline run that is a token is that token;
every other run starts as its characters and merges by merge rank (lowest first, leftmost on
ties); a final symbol that is no token becomes the ``<0xXX>`` tokens of its UTF-8 bytes (the
ones the vocabulary has). That is the SentencePiece-style tokenizer.json family (gputok's
``hf_spm``) with a ``Replace(" ", "▁")`` normaliser, no pre-tokenizer and byte fallback, once
three things hold; the loader makes the first true and checks the other two:

* no merge joins a newline to another character (runs are merged apart): such merges are
  dropped, so no symbol ever spans a run boundary;
* every newline token is what merging its own text gives (else llama.cpp's whole-run rule
  would differ): checked, refused otherwise;
* no merge takes a ``<0xXX>`` token as an operand (HF would merge fallback bytes, llama.cpp never
  does), and the vocabulary has all 256 byte tokens (without them llama.cpp drops a character
  outside the vocabulary after merging, HF before): checked, refused otherwise.

Gemma 4's vocabulary meets all three, and its HF tokenizer gives these ids (llama.cpp's test
texts, ``tests/test_real_vocabs.py``).
"""

from __future__ import annotations

from .gguf_types import CONTROL, UNKNOWN, USER_DEFINED

def _newline_run_reached(run: str, rank: dict) -> bool:
    """Whether merging ``run`` (all newlines) by rank ends in one symbol (the HF rule, leftmost
    lowest rank; a run is at most a few dozen characters)."""
    parts = list(run)
    while len(parts) > 1:
        best = min(((rank.get((parts[i], parts[i + 1]), -1), i) for i in range(len(parts) - 1)
                    if (parts[i], parts[i + 1]) in rank), default=None)
        if best is None:
            return False
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return True


def char_level(meta, tokens, types, where) -> dict:
    """The tokenizer.json (as a dict) that the GGUF file's vocabulary stands for."""
    merges_in = meta.get("tokenizer.ggml.merges")
    if merges_in is None:
        raise ValueError(f"{where}: a gemma4 tokenizer needs tokenizer.ggml.merges")
    byte_names = {f"<0x{b:02X}>" for b in range(256)}
    vocab: dict = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    n_bytes = len(byte_names.intersection(vocab))
    if n_bytes != 256:
        # without them llama.cpp drops a character outside the vocabulary after merging (its
        # neighbours do not merge across it), HF before (they do)
        raise ValueError(f"{where}: {n_bytes} of the 256 <0xXX> byte tokens: a BPE on "
                         "characters needs all of them here")
    merges, rank = [], {}
    for k, m in enumerate(merges_in):
        cut = m.find(" ", 1) if type(m) is str else -1  # llama.cpp: the first space after
        if cut < 0:  # the first character
            raise ValueError(f"{where}: tokenizer.ggml.merges[{k}] = {m!r}: expected 'a b'")
        if "\n" not in m and "<0x" not in m and m[0] != " ":
            merges.append(m)  # the common case, kept as the string HF's reader splits alike
            continue
        a, b = m[:cut], m[cut + 1:]
        if a in byte_names or b in byte_names:
            raise ValueError(f"{where}: tokenizer.ggml.merges[{k}] = {m!r} merges a byte "
                             "token: not supported for a BPE on characters")
        ab = a + b
        if "\n" in ab and ab.strip("\n"):
            continue  # joins a newline run to other text: never applies (runs merge apart)
        merges.append([a, b])
        if not ab.strip("\n"):
            rank.setdefault((a, b), k)  # (newline merges: for the whole-run check below)
    for t in vocab:
        if t and not t.strip("\n") and not _newline_run_reached(t, rank):
            raise ValueError(f"{where}: the newline token {t!r} is not reached by merging "
                             "(llama.cpp takes it whole): not supported")
    added = [{"id": i, "content": t, "special": k != USER_DEFINED}
             for i, (t, k) in enumerate(zip(tokens, types))
             if k in (CONTROL, UNKNOWN, USER_DEFINED)]
    cfg = {
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": None,
                  "byte_fallback": True, "fuse_unk": False, "ignore_merges": False},
    }
    return cfg
