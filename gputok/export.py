"""Exports that other libraries load: HF ``tokenizer.json`` and tiktoken's ``.tiktoken``.

* ``save_tiktoken(enc, path)``: the ranks file plus a ``<path>.json`` sidecar with the pattern and
  special tokens (tiktoken itself needs them passed to ``tiktoken.Encoding``; ``gputok.load``
  reads the sidecar).
* ``save_hf_json(enc, path)``: a byte-level BPE ``tokenizer.json``. For a tiktoken-rule encoding
  (ids are ranks), the tiktoken rule is expressed in HF terms: every token's splits into two
  tokens become merges, ordered by the token's rank (so merge priority follows rank), and
  ``ignore_merges`` gives tiktoken's "a piece that is a token is emitted whole". The regex is
  written for Oniguruma, HF's engine, where ``$`` means end of *line*: it becomes ``\\z``.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from pathlib import Path

from .bytelevel import spell, unspell

from .encoding import Encoding
from .loaders.tiktoken_file import sidecar_path, write_ranks


def _to_unicode(b: bytes) -> str:
    return spell(b)


def _onig_pattern(pat: str) -> str:
    """Rewrite a pattern (Python ``regex`` / Rust syntax) for Oniguruma, HF's engine.

    * ``$`` becomes ``\\z``: in Oniguruma a bare ``$`` is end of *line*.
    * A possessive counted quantifier ``X{n,m}+`` becomes the atomic group ``(?>X{n,m})``: in
      Oniguruma's Ruby syntax ``{n,m}+`` is a greedy ``{n,m}`` *repeated* by ``+``, so cl100k's
      ``\\p{N}{1,3}+`` would take a whole run of digits instead of groups of three. (``?+``,
      ``*+`` and ``++`` are possessive in both engines and stay as they are.)
    """
    out: list[str] = []
    atom = -1  # index in ``out`` where the last complete atom starts (-1: none)
    groups: list[int] = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "\\":
            j = i + 2
            if pat[i + 1:i + 2] in ("p", "P", "x", "N") and pat[j:j + 1] == "{":
                j = pat.index("}", j) + 1  # \p{L}, \x{41}: the braces belong to the escape
            atom = len(out)
            out.append(pat[i:j])
            i = j
            continue
        if c == "[":
            j = _class_end(pat, i)
            atom = len(out)
            out.append(pat[i:j])
            i = j
            continue
        if c == "(":
            groups.append(len(out))
            out.append(c)
            atom = -1
        elif c == ")":
            out.append(c)
            atom = groups.pop() if groups else -1
        elif c == "{" and _COUNTED.match(pat, i):
            m = _COUNTED.match(pat, i)
            i = m.end()
            if pat[i:i + 1] == "+" and atom >= 0:
                out[atom:] = ["(?>" + "".join(out[atom:]) + m.group() + ")"]
                i += 1
            else:
                out.append(m.group())
            continue
        elif c == "$":
            out.append(r"\z")
            atom = len(out) - 1
        elif c in "|*+?":
            out.append(c)
            if c == "|":
                atom = -1
        else:
            atom = len(out)
            out.append(c)
        i += 1
    return "".join(out)


_COUNTED = re.compile(r"\{\d*(?:,\d*)?\}")


def _class_end(pat: str, i: int) -> int:
    """Index just past the character class opening at ``pat[i] == "["`` (nested classes too)."""
    depth, j = 0, i
    while j < len(pat):
        c = pat[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            depth += 1
            j += 1
            # a "]" right after "[" or "[^" is a literal
            if pat[j:j + 1] == "^":
                j += 1
            if pat[j:j + 1] == "]":
                j += 1
            continue
        if c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise ValueError(f"unterminated character class in pattern {pat!r}")


def mergeable_ranks(enc: Encoding) -> dict[bytes, int]:
    """The non-special tokens as ``{bytes: id}`` (for tiktoken-rule encodings, ids are ranks)."""
    if not enc.model.segmenter.byte_level:
        raise ValueError(f"{enc.name} is a {enc.model.segmenter.name} model: only byte-level "
                         "BPE encodings can be exported (keep the .model / tokenizer.json / .gguf it came from)")
    return enc.model.token_ids_by_bytes


def save_tiktoken(enc: Encoding, path: "str | Path") -> Path:
    mergeable_ranks(enc)  # refuses other families first
    if enc.pat_str is None:
        raise ValueError(f"{enc.name}: its pre-tokenizer is not a single regex; it cannot be "
                         "expressed as a .tiktoken file")
    path = Path(path)
    write_ranks(path, mergeable_ranks(enc))
    sidecar_path(path).write_text(json.dumps(
        {"name": enc.name, "pat_str": enc.pat_str, "special_tokens": dict(enc.model.specials)},
        indent=1, ensure_ascii=False), "utf-8")
    return path


def _tiktoken_rule_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        for k in range(1, len(tok)):
            a, b = tok[:k], tok[k:]
            if a in ranks and b in ranks:
                merges.append((a, b))
    return merges


def save_hf_json(enc: Encoding, path: "str | Path") -> Path:
    mergeable_ranks(enc)  # refuses other families first
    if enc.pat_str is None:
        raise ValueError(f"{enc.name}: only single-regex pre-tokenizers can be exported")
    ranks = mergeable_ranks(enc)
    vocab = {_to_unicode(b): i for b, i in sorted(ranks.items(), key=lambda kv: kv[1])}
    if enc.model.ranks is not None:
        merges = _tiktoken_rule_merges(ranks)
        ignore_merges = True
    else:  # an HF-rule encoding: its merge table, in priority order
        table = enc.model.merge_table
        dec = enc.model.decoder
        order = sorted(table.pairs.items(), key=lambda kv: kv[1][0])
        merges = [(dec[k >> 32], dec[k & 0xFFFFFFFF]) for k, _ in order]
        ignore_merges = table.whole is not None
        # a trained token spelled like a special token shares its id (HF's trainer does that);
        # the model's vocab must still hold it, or HF refuses merges that mention it
        known = set(vocab.values())
        for k, (_prio, merged) in order:
            for i in (k >> 32, k & 0xFFFFFFFF, merged):
                if i not in known:
                    vocab[_to_unicode(dec[i])] = i
                    known.add(i)
    # HF gives an added token the id of its string in the model's vocab, and otherwise renumbers
    # it after the vocab (ignoring the id written here): so the added tokens go into the vocab
    # too, as HF's own trainer writes them. (Only strings of byte-level characters, which is
    # what gputok.load reads back; others, e.g. with a space, keep HF's numbering.)
    for s, i in chain(enc.model.specials.items(), enc.model.added.items()):
        if unspell(s) is not None:
            vocab.setdefault(s, i)
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for s, i in sorted(
                  enc.model.specials.items(), key=lambda kv: kv[1])]
    added += [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
               "normalized": False, "special": False} for s, i in enc.model.added.items()]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": _onig_pattern(enc.pat_str)},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": ignore_merges,
            "vocab": vocab,
            "merges": [[_to_unicode(a), _to_unicode(b)] for a, b in merges],
        },
    }
    path = Path(path)
    path.write_text(json.dumps(doc, ensure_ascii=False), "utf-8")
    return path
