"""SentencePiece BPE training: the pieces, scores and ids of ``spm_train --model_type=bpe``
(sentencepiece 0.2.3), written as a ``.model`` sentencepiece loads. The rules are
``cpu_ref/spm_train.py`` (numbered there); this is the fast path:

* **Words** (rules 1-4): sentences are normalised (``components.normalizers.spm``, the charsmap named by
  ``normalization_rule_name``), meta pieces become U+001F, the words (cut before each ``▁``)
  are counted; the characters are counted from the words, the required ones chosen by
  coverage, the others turned into U+2585 and the words counted again.
* **Merges** (rules 5-9): the native merge loop (``kernels/host_train_merge.h``) in its
  SentencePiece mode (``kernels/host_train_spm.h``: THE SPM PIECE RULE, THE SPM COMPARATOR,
  candidates kept at count 0, a piece made twice dropped), with work proportional to the
  merged pair's words, as for HF's rule.
* **Pieces and ids** (rule 10), and the ``.model`` (``spm_model.py``).

Corpus: an iterable of str (each one sentence, as ``SentencePieceTrainer``'s
``sentence_iterator`` takes them) or paths (.txt: one sentence per line, as ``spm_train``
reads its input; .jsonl / .parquet: each document's lines).
"""

from __future__ import annotations

import gzip
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from itertools import islice
from importlib import resources
from typing import Iterable, Iterator

import numpy as np

from . import native
from .spm_model import MODEL_TYPE_BPE, model_bytes

SPACE = "\u2581"
UNK_CHAR = "\u2585"
BOUNDARY = "\u001f"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6


class SpmTrainError(ValueError):
    """Settings or a corpus sentencepiece's trainer refuses, with its reason."""


@dataclass
class SpmOptions:
    """The trainer's settings that change pieces, scores or ids (TrainerSpec's names and
    defaults; ``cpu_ref.spm_train.SpmOptions`` is the same)."""

    vocab_size: int = 8000
    character_coverage: float = 0.9995
    max_sentencepiece_length: int = 16
    max_sentence_length: int = 4192
    split_by_unicode_script: bool = True
    split_by_number: bool = True
    split_by_whitespace: bool = True
    split_digits: bool = False
    treat_whitespace_as_suffix: bool = False
    allow_whitespace_only_pieces: bool = False
    byte_fallback: bool = False
    required_chars: str = ""
    control_symbols: list = field(default_factory=list)
    user_defined_symbols: list = field(default_factory=list)
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = -1
    unk_piece: str = "<unk>"
    bos_piece: str = "<s>"
    eos_piece: str = "</s>"
    pad_piece: str = "<pad>"
    hard_vocab_limit: bool = True
    normalization_rule_name: str = "nmt_nfkc"
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True


@dataclass
class SpmTrained:
    """A trained model: ``pieces`` as ``(piece, score, type)`` in id order."""

    pieces: list
    options: SpmOptions
    n_words: int = 0
    n_merges: int = 0

    def model_bytes(self) -> bytes:
        o = self.options
        trainer = {k: v for k, v in asdict(o).items() if k not in (
            "normalization_rule_name", "add_dummy_prefix", "remove_extra_whitespaces")}
        trainer.update(model_type=MODEL_TYPE_BPE, vocab_size=len(self.pieces))
        if not trainer["required_chars"]:
            del trainer["required_chars"]
        normalizer = dict(name=o.normalization_rule_name,
                          precompiled_charsmap=charsmap_blob(o.normalization_rule_name),
                          add_dummy_prefix=o.add_dummy_prefix,
                          remove_extra_whitespaces=o.remove_extra_whitespaces,
                          escape_whitespaces=True)
        return model_bytes(self.pieces, trainer, normalizer)

    def save(self, path) -> None:
        """Write the ``.model`` file (under a temporary name, then renamed)."""
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(self.model_bytes())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


# ---------------------------------------------------------------- tables


@lru_cache(maxsize=None)
def charsmap_blob(name: str) -> bytes:
    if name == "identity":
        return b""
    if name == "nmt_nfkc":
        raw = (resources.files("gputok") / "data" / "spm_nmt_nfkc.charsmap.gz").read_bytes()
        return gzip.decompress(raw)
    raise SpmTrainError(f"normalization_rule_name {name!r}: nmt_nfkc and identity are known")


@lru_cache(maxsize=None)
def _scripts() -> tuple:
    rows = [line.split() for line in (resources.files("gputok") / "data" / "spm_scripts.txt")
            .read_text().splitlines() if line.strip() and not line.startswith("#")]
    names = sorted({r[2] for r in rows} | {"Common", "Han"})
    index = {n: i for i, n in enumerate(names)}
    return (np.array([int(a, 16) for a, _, _ in rows], np.int64),
            np.array([int(b, 16) for _, b, _ in rows], np.int64),
            np.array([index[r[2]] for r in rows], np.int32), index)


def char_classes(chars: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(code points, script class, flags)`` of ``chars`` for ``host_train_spm.h``."""
    firsts, lasts, ids, index = _scripts()
    cps = np.array([ord(c) for c in chars], np.int64)
    k = np.searchsorted(firsts, cps, side="right") - 1
    inside = (k >= 0) & (cps <= lasts[np.maximum(k, 0)])
    script = np.where(inside, ids[np.maximum(k, 0)], index["Common"]).astype(np.int32)
    for name in ("Hiragana", "Katakana"):  # THE SPM PIECE RULE: kana count as Han
        script[script == index.get(name, -9)] = index["Han"]
    script[cps == 0x30FC] = index["Han"]
    script[script == index.get("Inherited", -9)] = -2
    flags = np.zeros(len(cps), np.uint8)
    flags[((cps >= 0x30) & (cps <= 0x39)) | ((cps >= 0xFF10) & (cps <= 0xFF19))] |= 1
    flags[cps == 0x2581] |= 2
    flags[np.isin(cps, [0, 0x1F, 0x20, 0x2585]) | ((cps >= 0xD800) & (cps <= 0xDFFF))] |= 4
    return cps.astype(np.uint32), script, flags


# ---------------------------------------------------------------- rules 1-4


def meta_pieces(o: SpmOptions) -> dict[int, tuple[str, int]]:
    """Rule 10's ids of the meta pieces: ``{id: (piece, type)}``."""
    meta: dict[int, tuple[str, int]] = {}
    for i, p in ((o.unk_id, o.unk_piece), (o.bos_id, o.bos_piece), (o.eos_id, o.eos_piece),
                 (o.pad_id, o.pad_piece)):
        if i < 0:
            continue
        if i >= o.vocab_size or i in meta:
            raise SpmTrainError(f"id {i} of {p!r} is taken or outside the vocabulary")
        meta[i] = (p, UNKNOWN if p == o.unk_piece else CONTROL)
    if o.unk_id < 0 and not o.byte_fallback:
        raise SpmTrainError(f"{o.unk_piece} must be defined")
    seen: set = set()
    nxt = 0
    extra = [(w, CONTROL) for w in o.control_symbols] + \
        [(w, USER_DEFINED) for w in o.user_defined_symbols] + \
        ([(f"<0x{b:02X}>", BYTE) for b in range(256)] if o.byte_fallback else [])
    for w, kind in extra:
        if w in seen:
            raise SpmTrainError(f"{w} is already defined. duplicated symbols are not allowed.")
        if w == o.unk_piece:
            raise SpmTrainError(f"{o.unk_piece} must not be defined with --control_symbols and "
                                "--user_defined_symbols.")
        seen.add(w)
        special = [i for i, p in ((o.bos_id, o.bos_piece), (o.eos_id, o.eos_piece),
                                  (o.pad_id, o.pad_piece)) if w == p and i >= 0]
        if special:
            meta[special[0]] = (w, kind)
            continue
        while nxt in meta:
            nxt += 1
        meta[nxt] = (w, kind)
    return meta


def _normalizer(o: SpmOptions):
    from ..components.normalizers.charsmap import CharsMap
    from ..components.normalizers.spm import SpmNormalizer

    blob = charsmap_blob(o.normalization_rule_name)
    return SpmNormalizer(charsmap=CharsMap(blob) if blob else None,
                         add_dummy_prefix=o.add_dummy_prefix,
                         remove_extra_whitespaces=o.remove_extra_whitespaces,
                         treat_whitespace_as_suffix=o.treat_whitespace_as_suffix,
                         user_defined=o.user_defined_symbols)


def split_into_words(text: str, o: SpmOptions) -> list[str]:
    """Rule 4 (``SplitIntoWords``); the default settings take ``str.split``."""
    if not o.treat_whitespace_as_suffix and not o.allow_whitespace_only_pieces:
        parts = text.split(SPACE)
        head = [parts[0]] if parts[0] else []
        return head + [SPACE + p for p in parts[1:]]
    words: list[str] = []
    in_ws = False
    if o.treat_whitespace_as_suffix:
        if text:
            words.append("")
        for i, c in enumerate(text):
            is_ws = c == SPACE
            if is_ws:
                in_ws = True
            elif in_ws:
                if o.allow_whitespace_only_pieces:
                    words.append("")
                in_ws = False
            words[-1] += c
            if i + 1 < len(text) and is_ws and not o.allow_whitespace_only_pieces:
                words.append("")
        return words
    for i, c in enumerate(text):
        is_ws = c == SPACE
        if i == 0 or (is_ws and (not in_ws or not o.allow_whitespace_only_pieces)):
            words.append("")
            in_ws = True
        if in_ws and not is_ws:
            in_ws = False
        words[-1] += c
    return words


def count_words(sentences: Iterable[str], o: SpmOptions, threads: "int | None" = None
                ) -> Counter:
    """Rules 1, 2 and 4 on normalised text: the words and their counts."""
    norm = _normalizer(o)
    keys = sorted({p for p, _ in meta_pieces(o).values()}, key=lambda k: (-len(k), k))
    meta_re = re.compile("|".join(map(re.escape, keys))) if keys else None
    usual = (o.add_dummy_prefix and o.remove_extra_whitespaces and
             not o.treat_whitespace_as_suffix and not o.allow_whitespace_only_pieces)
    words: Counter = Counter()
    parts = native.WordCounter(None, threads or native._threads())  # the fast path's words
    limit = o.max_sentence_length
    batch: list[str] = []

    def flush():
        rest = batch
        if usual:
            rest = _count_plain(norm, batch, meta_re, parts)
        for t in norm.normalize_many(rest):
            if meta_re is not None and meta_re.search(t):
                t = meta_re.sub(BOUNDARY, t)
            if t:
                words.update(split_into_words(t, o))
        batch.clear()

    it = iter(sentences)
    while True:  # rule 1, a chunk at a time
        chunk = list(islice(it, 8192))
        if not chunk:
            break
        batch.extend(s for s in chunk if s and UNK_CHAR not in s and
                     (len(s) * 4 <= limit or len(s.encode("utf-8")) <= limit))
        flush()
    try:
        for w, n in parts.result().items():
            words[w.decode("utf-8")] += n
    finally:
        parts.close()
    return words


def _may_rewrite(norm, cps: np.ndarray) -> np.ndarray:
    """Positions where a rule or a user-defined piece may start: a superset of
    ``norm._candidates`` that costs two table lookups per character (``_rewrite_tables``)."""
    if norm.ud_first is not None or norm.charsmap is None:
        return norm._candidates(cps)[0]
    single, start, second = _rewrite_tables(norm.charsmap)
    hit = single[cps]
    if len(cps) > 1:
        hit[:-1] |= start[cps[:-1]] & second[cps[1:]]
    return np.flatnonzero(hit)


_TABLES: dict = {}


def _rewrite_tables(cm) -> tuple:
    """Per code point: a one-character rule; the first character of a longer key; and a
    character whose first UTF-8 byte continues some key after its first character (found by
    trying every byte from every node a first character reaches: for nmt_nfkc only combining
    marks and characters of 3-4 bytes do, so a plain Latin sentence is one lookup a
    character)."""
    got = _TABLES.get(id(cm))
    if got is None or got[0] is not cm:
        from ..components.normalizers.charsmap import utf8_bytes

        node1, leaf1, _value = cm._per_cp
        nodes = np.unique(node1[node1 >= 0]).astype(np.int64)
        units = cm.units.astype(np.int64)
        b = np.arange(256, dtype=np.int64)
        nxt = nodes[:, None] ^ b[None, :]
        ok = nxt < len(units)
        unit = np.where(ok, units[np.minimum(nxt, len(units) - 1)], 0)
        first = np.flatnonzero((ok & ((unit & 0x800000FF) == b[None, :])).any(axis=0))
        lead = utf8_bytes(np.arange(0x110000, dtype=np.uint32))[0][:, 0]
        got = _TABLES[id(cm)] = (cm, (leaf1.copy(), node1 >= 0, np.isin(lead, first)))
    return got[1]


_MARK = SPACE.encode("utf-8")
_RUNS = re.compile(" {2,}")
_TRAILING = re.compile("\u2581+(?=\0|$)")


def _count_plain(norm, batch: list, meta_re, parts) -> list:
    """The usual settings' fast path: the sentences no rule or user-defined piece touches
    (most of them) normalised and cut into words all at once, over the joined batch; returns
    the others. Per sentence (U+0000 joins them; sentences holding it go the slow way): runs
    of spaces collapse, leading and trailing spaces go and so do trailing ``▁`` (an all-space
    sentence becomes empty and is dropped), spaces become ``▁``, meta pieces become U+001F.
    Each sentence then starts with the dummy ``▁``: the batch's words are its pieces that start
    with ``▁``, which the native counter ``parts`` counts (``WordCounter.add_marked``)."""
    from .._arrays import code_points

    keep = [s for s in batch if "\0" not in s]
    others = [s for s in batch if "\0" in s]
    joined = "\0".join(keep)
    cand = _may_rewrite(norm, code_points(joined))
    if len(cand):  # sentences a rule may touch go the sentence-by-sentence way
        starts = np.zeros(len(keep) + 1, np.int64)
        np.cumsum([len(s) + 1 for s in keep], out=starts[1:])
        touched = np.zeros(len(keep), bool)
        touched[np.searchsorted(starts, cand, side="right") - 1] = True
        others += [s for s, t in zip(keep, touched.tolist()) if t]
        joined = "\0".join(s for s, t in zip(keep, touched.tolist()) if not t)
    if not joined:
        return others
    if "  " in joined:
        joined = _RUNS.sub(" ", joined)
    joined = joined.replace("\0 ", "\0").replace(" \0", "\0").strip(" ")
    if SPACE + "\0" in joined or joined.endswith(SPACE):
        joined = _TRAILING.sub("", joined)
    while "\0\0" in joined:  # sentences left empty
        joined = joined.replace("\0\0", "\0")
    joined = joined.strip("\0").replace(" ", SPACE)
    if meta_re is not None:
        joined = meta_re.sub(BOUNDARY, joined)
    if joined:
        parts.add_marked((SPACE + joined.replace("\0", SPACE)).encode("utf-8"), _MARK)
    return others


def required_chars(words: Counter, o: SpmOptions) -> tuple[list[tuple[str, int]], list[str]]:
    """Rule 3: the required characters with their counts, in rule 10's order, and every
    character of the words."""
    text = "".join(words)
    cps = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    weight = np.repeat(np.fromiter(words.values(), np.int64, len(words)),
                       [len(w) for w in words])
    per_cp = np.bincount(cps, weights=weight, minlength=0x110000)
    uniq = np.flatnonzero(per_cp)
    counts = per_cp[uniq].astype(np.int64)
    table = {chr(c): int(n) for c, n in zip(uniq.tolist(), counts.tolist()) if c != 0}
    listed = set(o.required_chars) - {"\x00"}
    for c in listed:
        table.setdefault(c, 0)
    total = sum(table.values())
    if total == 0:
        raise SpmTrainError("no sentence left to train on")
    target = np.float32(o.character_coverage)
    out: list[tuple[str, int]] = []
    taken = 0
    for c, n in sorted(table.items(), key=lambda kv: (kv[0] not in listed, -kv[1], kv[0])):
        if np.float32(taken / total) >= target:
            break
        taken += n
        if c != BOUNDARY:
            out.append((c, n))
    return sorted(out, key=lambda kv: (-kv[1], kv[0])), [chr(c) for c in uniq.tolist()]


# ---------------------------------------------------------------- training


def sentences_of(corpus, *, field: str = "text", errors: str = "strict") -> Iterator[str]:
    """The corpus as sentences: str items as they are; a .txt file line by line (streamed, as
    ``spm_train`` reads it: lines end at "\\n" only); other files' documents split into lines."""
    from .words import _check_paths, _is_pathlike, corpus_texts

    if _is_pathlike(corpus):
        corpus = [corpus]
    if isinstance(corpus, (list, tuple)) and corpus and all(map(_is_pathlike, corpus)):
        _check_paths(corpus)
        for p in corpus:
            if str(p).endswith(".txt"):
                with open(p, "rb") as f:
                    for i, line in enumerate(f, 1):
                        try:
                            yield line.rstrip(b"\n").decode("utf-8")
                        except UnicodeDecodeError as e:
                            if errors != "replace":
                                raise ValueError(f"{p}:{i}: invalid UTF-8 ({e.reason} at byte "
                                                 f"{e.start}); pass errors='replace'") from None
                            yield line.rstrip(b"\n").decode("utf-8", "replace")
            else:
                texts, _total, _unit = corpus_texts([p], field=field, errors=errors)
                for doc, _n in texts:
                    yield from doc.split("\n")
        return
    texts, _total, _unit = corpus_texts(corpus, field=field, errors=errors)
    for t, _n in texts:
        yield t


def train_spm_bpe(corpus, *, vocab_size: int = 8000, threads: "int | None" = None,
                  field: str = "text", errors: str = "strict", **options) -> SpmTrained:
    """Train a SentencePiece BPE model as ``spm_train --model_type=bpe`` does: the same pieces,
    scores and ids. ``options``: ``SpmOptions``' fields (``character_coverage``,
    ``byte_fallback``, ``user_defined_symbols``, ``control_symbols``, ...).

    >>> m = train_spm_bpe(["low lower lowest"] * 5, vocab_size=24)
    >>> [p for p, _s, _t in m.pieces[3:8]]
    ['lo', 'low', '▁low', '▁lowe', 'st']
    """
    unknown = set(options) - set(SpmOptions.__dataclass_fields__)
    if unknown:
        raise TypeError(f"train_spm_bpe: unknown option(s) {', '.join(sorted(unknown))}")
    o = SpmOptions(vocab_size=vocab_size, **options)
    if not 0.98 <= o.character_coverage <= 1.0:
        raise SpmTrainError("character_coverage must be in [0.98, 1.0]")
    if not 1 <= o.max_sentencepiece_length <= 512:
        raise SpmTrainError("max_sentencepiece_length must be in [1, 512]")
    meta = meta_pieces(o)
    words = count_words(sentences_of(corpus, field=field, errors=errors), o, threads)
    if not words:
        raise SpmTrainError("no sentence left to train on")
    chars, seen = required_chars(words, o)
    if len(chars) + len(meta) > o.vocab_size:
        raise SpmTrainError(f"Vocabulary size is smaller than required_chars. {o.vocab_size} vs "
                            f"{len(chars) + len(meta)}. Increase vocab_size or decrease "
                            "character_coverage with --character_coverage option.")
    keep = {c for c, _ in chars}
    rare = {ord(c): UNK_CHAR for c in seen if c not in keep}
    if rare:
        folded: Counter = Counter()
        for w, n in words.items():
            folded[w.translate(rare)] += n
        words = folded
    n_merges = o.vocab_size - len(meta) - len(chars)
    merged = _merge(words, [c for c, _ in chars], n_merges, o, threads)
    if len(merged) < n_merges and o.hard_vocab_limit:
        have = len(meta) + len(chars) + len(merged)
        raise SpmTrainError(f"Vocabulary size too high ({o.vocab_size}). Please set it to a value "
                            f"<= {have}.")
    finals = merged + [c for c, _ in chars]
    pieces, k = [], 0
    for i in range(max(o.vocab_size, len(meta))):  # rule 10
        if i in meta:
            pieces.append((meta[i][0], 0.0, meta[i][1]))
        elif k < len(finals):
            pieces.append((finals[k], -float(np.float32(k)), NORMAL))
            k += 1
    return SpmTrained(pieces, o, n_words=len(words), n_merges=len(merged))


def _merge(words: Counter, chars: list[str], n_merges: int, o: SpmOptions,
           threads: "int | None") -> list[str]:
    """Rules 5-9 in the native loop: the merged pieces in order."""
    alphabet = chars + [UNK_CHAR]
    cid = {c: i for i, c in enumerate(alphabet)}
    text = "".join(words)
    cps = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    lut = np.zeros(0x110000, np.uint32)
    lut[[ord(c) for c in alphabet]] = np.arange(len(alphabet), dtype=np.uint32)
    ids = lut[cps]
    offsets = np.zeros(len(words) + 1, np.int64)
    np.cumsum([len(w) for w in words], out=offsets[1:])
    counts = np.fromiter(words.values(), np.int64, len(words))
    encoded = [c.encode("utf-8") for c in alphabet]
    tok = np.frombuffer(b"".join(encoded), np.uint8)
    tok_off = np.zeros(len(alphabet) + 1, np.int64)
    np.cumsum([len(e) for e in encoded], out=tok_off[1:])
    c_cps, c_script, c_flags = char_classes(alphabet)
    rule_flags = (o.split_by_unicode_script * 1 | o.split_by_number * 2 |
                  o.split_by_whitespace * 4 | o.split_digits * 8 |
                  o.treat_whitespace_as_suffix * 16 | o.allow_whitespace_only_pieces * 32)
    lib = native.library()
    a = native._addr
    ctx = lib.gputok_train_spm_new(a(ids), a(offsets), a(counts), len(counts), a(tok),
                                   a(tok_off), len(alphabet), a(c_cps), a(c_script), a(c_flags),
                                   len(alphabet), int(o.max_sentencepiece_length), rule_flags,
                                   int(threads or native._threads()), int(native._par_min))
    if not ctx:
        raise MemoryError("gputok train: out of memory building the pair counts")
    del ids
    piece = list(alphabet)
    out = np.empty(4 * native.BLOCK_MERGES, np.int64)
    merged: list[str] = []
    try:
        while len(merged) < n_merges:
            step = min(native.BLOCK_MERGES, n_merges - len(merged))
            done = lib.gputok_train_merge_run(ctx, step, len(alphabet) + n_merges, 0, a(out))
            if done < 0:
                raise MemoryError("gputok train: out of memory in the merge loop")
            for left, right, c, _n in out[:4 * done].reshape(-1, 4).tolist():
                if c != len(piece):
                    raise RuntimeError(f"merge {len(merged)}: id {c}, expected {len(piece)}")
                piece.append(piece[left] + piece[right])
                merged.append(piece[-1])
            if done < step:
                break
    finally:
        lib.gputok_train_merge_free(ctx)
    return merged
