"""SentencePiece BPE (``.model`` files, ``model_type: BPE``): the literal algorithm.

The oracle is sentencepiece itself (``bpe_model.cc``, ``normalizer.cc`` and
``sentencepiece_processor.cc`` of 0.2.x); every rule below was checked against it, and the edge
cases found by experiment are written down where they apply. Unlike byte-level BPE there is no
pre-tokenizer: the whole normalised sentence is one sequence of symbols.

    text --normalise--> "▁Hello▁world" --characters (user-defined pieces whole)--> symbols
         --merge the best-scoring adjacent pair, repeatedly--> pieces --resegment UNUSED,
         byte fallback or fused unk--> ids

What gputok's fast path must compute
------------------------------------
1. The normalised sentence (``SpmNormalizer.normalize``): identity models only escape spaces and
   add the dummy prefix; charsmap models rewrite spans (see ``charsmap``).
2. Cut it into independent spans between adjacent characters ``(a, b)`` that are not in
   ``inner_pairs()`` (they sit side by side inside no mergeable piece, user-defined ones
   included): no merged symbol and no user-defined match can cross such a cut, so each span
   merges alone. In Mistral's and botchan's vocabularies no piece has "▁" after another
   character, so every word boundary is a cut.
3. Merge each span with the table-driven merge: ``(left, right) -> (priority, merged_id)`` where
   the priority is ``dense_ranks(scores)`` (``score_key`` order; higher score first, equal
   scores are true ties broken leftmost). Initial symbols are characters, which are not always
   pieces (unknown characters): key the table by character for them. (In the vocabularies we
   test, every multi-character piece is the join of two pieces, so pairs of pieces suffice once
   the first merge is done.)
4. Emit: UNUSED pieces are split back (``resegment``), unknown symbols become byte pieces (byte
   fallback) or one unk id per *run* (runs fuse across span cuts). A model with UNUSED pieces
   reads a sentence-wide map while resegmenting (see ``encode_normalized``): a fast path must fall
   back to the whole sentence for such models.
"""

from __future__ import annotations

import heapq
import struct
from pathlib import Path

from . import specials
from .charsmap import CharsMap, valid_utf8_len
from .spm_proto import (BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED, ModelProto,
                        load_model, parse_model)

SPACE = "\u2581"  # "▁", sentencepiece's kSpaceSymbol
MAX_RESEGMENT_DEPTH = 100  # bpe_model.cc kMaxBpeResegmentDepth
MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}


def score_key(score: float) -> int:
    """THE COMPARATOR (SentencePiece BPE): the order of two merge candidates' scores.

    sentencepiece compares the float32 *bit patterns* (``SymbolPairComparator``): for two negative
    floats the larger pattern is the smaller score, otherwise patterns order as floats do, and a
    negative pattern is below a non-negative one. That is float order except that -0.0 ranks below
    +0.0. This key reproduces it as an int; equal keys are true ties, broken to the leftmost pair.

    >>> score_key(-1.5) < score_key(-0.0) < score_key(0.0) < score_key(2.0)
    True
    """
    (bits,) = struct.unpack("<I", struct.pack("<f", score))
    return bits & 0x7FFFFFFF if bits < 0x80000000 else -(bits & 0x7FFFFFFF) - 1


def dense_ranks(scores: list[float]) -> list[int]:
    """Merge priority of each piece for a table-driven merge: the dense rank of its score in
    ``score_key`` order, 0 for the highest score; equal scores share a rank (and then the
    leftmost pair wins, as in ``encode_normalized``).

    >>> dense_ranks([-1.0, -1e9, 0.0, -1.0, -0.0])
    [2, 3, 0, 2, 1]
    """
    keys = sorted({score_key(s) for s in scores}, reverse=True)
    rank = {k: r for r, k in enumerate(keys)}
    return [rank[score_key(s)] for s in scores]


def byte_piece(b: int) -> str:
    return f"<0x{b:02X}>"  # ByteToPiece: upper-case hex


class SpmNormalizer:
    """``normalizer.cc``'s ``Normalize``: charsmap rewrite + whitespace handling.

    Works on UTF-8 bytes, as the C++ does, because rules match byte prefixes.
    """

    def __init__(self, spec, *, treat_whitespace_as_suffix: bool = False,
                 user_defined: "frozenset[str]" = frozenset()):
        self.spec = spec
        self.suffix = treat_whitespace_as_suffix
        self.charsmap = CharsMap(spec.precompiled_charsmap) if spec.precompiled_charsmap else None
        self.user_defined = frozenset(u.encode("utf-8") for u in user_defined)
        self.max_user = max((len(u) for u in self.user_defined), default=0)

    def _prefix(self, data: bytes, pos: int) -> tuple[bytes, int]:
        """``NormalizePrefix``: (replacement, bytes consumed) at ``data[pos:]``."""
        # User-defined pieces first, longest match, never normalised: "ﬁ" stays "ﬁ" when it is a
        # user-defined piece even under nmt_nfkc.
        for n in range(min(self.max_user, len(data) - pos), 0, -1):
            if data[pos:pos + n] in self.user_defined:
                return data[pos:pos + n], n
        if self.charsmap is not None:
            rule = self.charsmap.lookup(data, pos)
            if rule is not None:
                return rule[1], rule[0]
        n = valid_utf8_len(data, pos)
        if n == 0:
            return "\ufffd".encode(), 1  # one malformed byte becomes U+FFFD
        return data[pos:pos + n], n

    def normalize(self, text: str) -> str:
        """The normalised sentence.

        >>> from cpu_ref.spm_proto import NormalizerSpec
        >>> SpmNormalizer(NormalizerSpec()).normalize("  Hello   world ")
        '▁Hello▁world'
        """
        spec, data = self.spec, text.encode("utf-8")
        pos = 0
        if spec.remove_extra_whitespaces:  # drop leading prefixes that normalise to exactly " "
            while pos < len(data):
                rep, n = self._prefix(data, pos)
                if rep != b" ":
                    break
                pos += n
        if pos == len(data):
            return ""
        space = SPACE.encode() if spec.escape_whitespaces else b" "
        out = bytearray()
        if not self.suffix and spec.add_dummy_prefix:
            out += space
        is_prev_space = spec.remove_extra_whitespaces
        while pos < len(data):
            rep, n = self._prefix(data, pos)
            if is_prev_space:
                rep = rep.lstrip(b" ")  # collapse runs of spaces (only " ", not "▁" or "\t")
            if rep:
                out += rep.replace(b" ", space)
                is_prev_space = rep.endswith(b" ")
            pos += n
            if not spec.remove_extra_whitespaces:
                is_prev_space = False
        if spec.remove_extra_whitespaces:
            # Trailing space symbols go, even ones that were a literal "▁" in the input.
            while out.endswith(space):
                del out[-len(space):]
        if self.suffix and spec.add_dummy_prefix:
            out += space
        return out.decode("utf-8")


class RefSentencePiece:
    """A SentencePiece BPE model, encoded and decoded the literal way.

    Control pieces (``<s>``, ``</s>``, ``[INST]``...) are the special tokens of gputok's contract
    (``cpu_ref.specials``): sentencepiece itself never produces them from text (it spells
    ``"<s>"`` with ordinary pieces), so ``encode_ordinary`` is what matches it. Each text segment
    between allowed specials is normalised as a sentence of its own (dummy prefix included), as
    prompt builders like mistral-common do. BOS/EOS are never added implicitly.

    >>> from cpu_ref.spm_proto import ModelProto
    >>> m = ModelProto(pieces=[("<unk>", 0.0, 2), ("▁", -1.0, 1), ("a", -2.0, 1), ("▁a", -0.5, 1)])
    >>> m.trainer_spec.model_type = 2  # BPE
    >>> sp = RefSentencePiece(m)
    >>> sp.encode_ordinary("a a"), sp.decode([3, 3])
    ([3, 3], 'a a')
    """

    MODEL_TYPE = 2  # trainer_spec.model_type: BPE (``cpu_ref.unigram`` reads UNIGRAM = 1)

    def __init__(self, source: "str | Path | bytes | ModelProto"):
        if isinstance(source, ModelProto):
            model, where = source, "ModelProto"
        elif isinstance(source, (bytes, bytearray)):
            model, where = parse_model(bytes(source)), "ModelProto bytes"
        else:
            model, where = load_model(source), str(source)
        self.model = model
        ts = model.trainer_spec
        if ts.model_type != self.MODEL_TYPE:
            kind = MODEL_TYPES.get(ts.model_type, str(ts.model_type))
            raise ValueError(f"{where}: model_type {kind} is not a "
                             f"{MODEL_TYPES[self.MODEL_TYPE]} model (this reference reads "
                             f"trainer_spec.model_type = {MODEL_TYPES[self.MODEL_TYPE]})")
        if model.denormalizer_spec is not None and model.denormalizer_spec.precompiled_charsmap:
            raise ValueError(f"{where}: a denormalizer_spec charsmap is not supported")
        self.pieces = [p for p, _, _ in model.pieces]
        self.scores = [s for _, s, _ in model.pieces]
        self.types = [t for _, _, t in model.pieces]
        self.byte_fallback = ts.byte_fallback
        self.piece_to_id: dict[str, int] = {}
        unk = [i for i, t in enumerate(self.types) if t == UNKNOWN]
        for i, (p, t) in enumerate(zip(self.pieces, self.types)):
            if p == "\0" and (t == UNUSED or ts.byte_fallback):
                # sentencepiece skips a NUL piece (conversion scripts add one next to <0x00>)
                self.types[i] = UNUSED
            elif not p or "\0" in p:
                raise ValueError(f"{where}: piece {i} is empty or contains NUL")
            elif t == BYTE and not ts.byte_fallback:
                raise ValueError(f"{where}: byte piece {p!r} but trainer_spec.byte_fallback is "
                                 f"false")
            elif self.piece_to_id.setdefault(p, i) != i:  # a piece names one id
                raise ValueError(f"{where}: piece {p!r} is defined twice (ids "
                                 f"{self.piece_to_id[p]} and {i})")
        if len(unk) > 1:
            raise ValueError(f"{where}: more than one UNKNOWN piece (ids {unk})")
        self.unk_id = unk[0] if unk else -1
        if self.unk_id < 0 and not ts.byte_fallback:
            raise ValueError(f"{where}: no UNKNOWN piece and no byte fallback")
        if ts.byte_fallback:
            missing = [b for b in range(256) if byte_piece(b) not in self.piece_to_id]
            if missing:
                raise ValueError(f"{where}: byte_fallback is set but {len(missing)} byte pieces "
                                 f"are missing (first: {byte_piece(missing[0])})")
        self.user_defined = frozenset(p for p, t in zip(self.pieces, self.types)
                                      if t == USER_DEFINED)
        self.max_user = max((len(u) for u in self.user_defined), default=0)
        self.normalizer = SpmNormalizer(
            model.normalizer_spec, treat_whitespace_as_suffix=ts.treat_whitespace_as_suffix,
            user_defined=self.user_defined)
        self.special_tokens = {p: i for i, (p, t) in enumerate(zip(self.pieces, self.types))
                               if t == CONTROL}
        self.unk_surface = ts.unk_surface
        # sentencepiece's decoder replaces every "▁" of a piece only when some piece has one
        # after its first character; otherwise only a leading one (same result for real pieces).
        self.n_vocab = len(self.pieces)

    # -- encoding -----------------------------------------------------------------------------

    def _mergeable(self, piece: str) -> int | None:
        """The id of ``piece`` if BPE may produce it (NORMAL, USER_DEFINED, UNUSED), else None.
        CONTROL, UNKNOWN and BYTE pieces are never merge results (``IsReservedId``)."""
        i = self.piece_to_id.get(piece)
        if i is None or self.types[i] not in (NORMAL, USER_DEFINED, UNUSED):
            return None
        return i

    def _symbols(self, normalized: str) -> list[tuple[str, bool]]:
        """Initial symbols: a user-defined piece (longest match, frozen) or one character."""
        out, pos = [], 0
        while pos < len(normalized):
            for n in range(min(self.max_user, len(normalized) - pos), 0, -1):
                if normalized[pos:pos + n] in self.user_defined:
                    out.append((normalized[pos:pos + n], True))
                    pos += n
                    break
            else:
                out.append((normalized[pos], False))
                pos += 1
        return out

    def encode_normalized(self, normalized: str) -> list[tuple[str, int]]:
        """``bpe::Model::Encode``: (piece, id) for a normalised sentence, before byte fallback.

        The rule: repeatedly merge the adjacent pair of unfrozen symbols whose joined string is a
        mergeable piece with the highest score (``score_key``), the leftmost of equal scores, until
        no pair qualifies. It is run here the way sentencepiece runs it -- an agenda (heap) of
        candidate pairs with stale entries skipped -- because the UNUSED-piece bookkeeping below is
        defined by the order in which candidates enter that agenda. (tests/test_cpu_ref_families.py
        checks it against a rescan-everything version of the rule.) An unknown symbol comes out
        as ``(symbol, unk_id)``.
        """
        syms = self._symbols(normalized)
        text = [s for s, _ in syms]
        frozen = [f for _, f in syms]
        prev = list(range(-1, len(syms) - 1))
        nxt = list(range(1, len(syms))) + [-1]
        agenda: list[tuple[int, int, int, int]] = []  # (-score_key, left, right, length)
        # rev_merge: merged UNUSED string -> the (left, right) it was last *proposed* from. It is
        # written whenever a candidate enters the agenda (not only when it merges), and it is one
        # map for the whole sentence, so a later proposal elsewhere overwrites an earlier one.
        rev_merge: dict[str, tuple[str, str]] = {}

        def propose(left: int, right: int) -> None:
            if left < 0 or right < 0 or frozen[left] or frozen[right]:
                return
            j = self._mergeable(text[left] + text[right])
            if j is None:
                return
            # THE COMPARATOR: highest score first, then the smallest left index (the heap pops
            # the smallest tuple, so the score goes in negated).
            heapq.heappush(agenda, (-score_key(self.scores[j]), left, right,
                                    len(text[left]) + len(text[right])))
            if self.types[j] == UNUSED:
                rev_merge[text[left] + text[right]] = (text[left], text[right])

        for i in range(len(syms) - 1):
            propose(i, i + 1)
        while agenda:
            _, left, right, length = heapq.heappop(agenda)
            # stale: one side was merged away, or grew since the pair was proposed (symbols only
            # grow, so an unchanged total length means an unchanged pair)
            if not text[left] or not text[right] or len(text[left]) + len(text[right]) != length:
                continue
            text[left] += text[right]
            text[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            propose(prev[left], left)
            propose(left, nxt[left])
        out: list[tuple[str, int]] = []
        i = 0 if syms else -1
        while i != -1:
            self._resegment(text[i], rev_merge, out, 0)
            i = nxt[i]
        return out

    def _resegment(self, w: str, rev_merge, out: list, depth: int) -> None:
        i = self.piece_to_id.get(w, self.unk_id)
        if depth > MAX_RESEGMENT_DEPTH:
            out.append((w, i))
        elif i == self.unk_id or self.types[i] not in (NORMAL, USER_DEFINED, UNUSED):
            # not a piece, or a single character that spells a CONTROL/BYTE piece: unknown
            out.append((w, self.unk_id))
        elif self.types[i] != UNUSED:
            out.append((w, i))
        elif w in rev_merge:
            a, b = rev_merge[w]
            self._resegment(a, rev_merge, out, depth + 1)
            self._resegment(b, rev_merge, out, depth + 1)
        else:
            out.append((w, self.unk_id))  # an UNUSED single character is unknown

    def inner_pairs(self) -> frozenset[tuple[str, str]]:
        """Character pairs that occur side by side inside some mergeable piece (NORMAL,
        USER_DEFINED or UNUSED). Between two adjacent characters that are *not* such a pair, no
        merge and no user-defined match can ever cross, so a fast path may cut the normalised
        sentence there and encode the spans independently (models without UNUSED pieces: their
        resegmentation reads one sentence-wide map)."""
        pairs = set()
        for p, t in zip(self.pieces, self.types):
            if t in (NORMAL, USER_DEFINED, UNUSED):
                pairs.update(zip(p, p[1:]))
        return frozenset(pairs)

    def _is_unk(self, i: int) -> bool:
        return i == self.unk_id or (i >= 0 and self.types[i] == UNKNOWN)

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of ``text`` as sentencepiece's ``encode`` gives them (no BOS/EOS).

        Lone surrogates become U+FFFD first (sentencepiece's Python binding refuses them).
        """
        text = specials.fix_surrogates(text)
        out: list[int] = []
        prev_unk = False
        for w, i in self.encode_normalized(self.normalizer.normalize(text)):
            unk = self._is_unk(i)
            if unk and self.byte_fallback:
                out.extend(self.piece_to_id[byte_piece(b)] for b in w.encode("utf-8"))
            elif not (unk and prev_unk):  # a run of unknown symbols is one unk id
                out.append(i)
            prev_unk = unk
        return out

    def encode(self, text: str, *, allowed_special="none", disallowed_special="all") -> list[int]:
        allowed, disallowed = specials.normalize_special_args(
            self.special_tokens.keys(), () if allowed_special == "none" else allowed_special,
            disallowed_special)
        specials.check_disallowed(text, disallowed)
        out: list[int] = []
        for seg, is_special in specials.split_specials(specials.fix_surrogates(text), allowed):
            out.extend([self.special_tokens[seg]] if is_special else self.encode_ordinary(seg))
        return out

    # -- decoding -----------------------------------------------------------------------------

    def decode(self, ids) -> str:
        """sentencepiece's ``decode``: control pieces vanish, unk becomes ``unk_surface``,
        runs of byte pieces are reassembled (each byte of a malformed sequence is one U+FFFD),
        "▁" becomes " " and the dummy prefix's "▁" is dropped from the first piece."""
        spec = self.model.normalizer_spec
        text, pending = [], bytearray()
        at_bos, bos_ws_seen = True, False
        for i in ids:
            if not 0 <= i < self.n_vocab:
                raise ValueError(f"token id {i} out of range [0, {self.n_vocab})")
            if self.types[i] == BYTE:
                pending.append(int(self.pieces[i][3:5], 16))
                continue
            text.append(_decode_bytes(pending))
            pending.clear()
            if bos_ws_seen or any(text):
                at_bos = False
            bos_ws_seen = False
            piece = self.pieces[i]
            if self.types[i] == CONTROL:
                continue
            if self._is_unk(i):
                text.append(self.unk_surface)
                continue
            if at_bos and (spec.add_dummy_prefix or spec.remove_extra_whitespaces):
                if piece.startswith(SPACE):
                    piece = piece[1:]
                    # with remove_extra_whitespaces every leading space piece is dropped
                    bos_ws_seen = not spec.remove_extra_whitespaces
            text.append(piece.replace(SPACE, " "))
        text.append(_decode_bytes(pending))
        return "".join(text)


def _decode_bytes(data: bytes) -> str:
    """sentencepiece's byte-piece decoding: valid characters as they are, and one U+FFFD per
    byte that does not start a valid character (Python's ``errors="replace"`` would merge a
    truncated sequence into one U+FFFD instead)."""
    out, pos = [], 0
    while pos < len(data):
        n = valid_utf8_len(data, pos)
        if n == 0:
            out.append("\ufffd")
            pos += 1
        else:
            out.append(data[pos:pos + n].decode("utf-8"))
            pos += n
    return "".join(out)
