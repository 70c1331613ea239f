"""WordPiece (BERT) as HF ``tokenizers`` runs it: BertNormalizer, BertPreTokenizer, WordPiece.

    text --clean_text, CJK spacing, strip accents, lowercase--> normalised
         --split on whitespace (dropped) and punctuation (kept alone)--> words
         --greedy longest match from the left, "##" on non-initial pieces--> ids

A word longer than ``max_input_chars_per_word`` characters, or one the greedy match cannot cover
completely, becomes a single ``[UNK]`` (the *whole* word, not just the part that failed).

What gputok's fast path must compute
------------------------------------
The normaliser is a per-character map (drop / space / pad with spaces / NFD minus Mn / lowercase),
except that NFD reorders combining marks (canonical order); words are cut at whitespace and at
punctuation characters, so they are independent. Per word: the greedy longest-prefix match is a
walk down a trie of the vocabulary (a second trie for the "##" continuations); the device needs the
word's length in characters (for ``max_input_chars_per_word``) and a failure flag that turns the
whole word into one unk id.

Unicode tables (the oracle's, documented here; cpu_ref uses Python's ``unicodedata``):
HF 0.23 takes these properties from tables of *different* Unicode versions: ``is_other`` (for
clean_text: Cc, Cf, Co -- unassigned Cn characters are kept), ``is_mark_nonspacing`` and
``is_punctuation`` from an old Unicode (before 10.0: e.g. U+07FD NKo Dantayalan is not stripped,
U+166D is still punctuation), NFD from an old normalisation crate, and ``to_lowercase`` from
Rust's standard library (Unicode 16: it lowercases letters Python 3.11's Unicode 14 does not
know). Against Python 3.11 that is a few hundred code points, all recently assigned or
re-categorised (``tests/test_cpu_ref_wordpiece.py`` enumerates them); real text does not meet
them, and the fuzz tests keep to code points where both agree. Lowercasing is per character, as
HF does: a final capital sigma becomes "σ", not the "ς" of Python's ``str.lower``.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

from . import specials

# Rust's char::is_whitespace (the Unicode White_Space property, stable since 6.x). Python's
# str.isspace adds U+001C..U+001F, which Rust does not count.
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
                        "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

# BertNormalizer's "Chinese character" blocks: CJK Unified Ideographs and extensions A-E,
# compatibility ideographs (not Hiragana, Katakana or Hangul).
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_cjk(c: str) -> bool:
    o = ord(c)
    return any(a <= o <= b for a, b in CJK_RANGES)


def is_punctuation(c: str) -> bool:
    """BertPreTokenizer: ASCII punctuation (which includes symbols such as "$" "+" "^" "`") or any
    Unicode P* category."""
    o = ord(c)
    return (33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126
            or unicodedata.category(c).startswith("P"))


def bert_normalize(text: str, *, clean_text: bool = True, handle_chinese_chars: bool = True,
                   strip_accents: "bool | None" = None, lowercase: bool = True) -> str:
    """HF ``BertNormalizer``; ``strip_accents=None`` means "same as lowercase".

    >>> bert_normalize("Héllo\\tWörld 中文!")
    'hello world  中  文 !'
    """
    if clean_text:
        # NUL and U+FFFD and control/format/private-use characters vanish (tab, LF, CR are
        # whitespace, not control); every whitespace character becomes a plain space.
        text = "".join(" " if c in WHITE_SPACE else c for c in text
                       if c not in "\x00\ufffd" and (c in "\t\n\r" or unicodedata.category(c)
                                                     not in ("Cc", "Cf", "Co")))
    if handle_chinese_chars:
        text = "".join(f" {c} " if is_cjk(c) else c for c in text)
    if lowercase if strip_accents is None else strip_accents:
        text = "".join(c for c in unicodedata.normalize("NFD", text)
                       if unicodedata.category(c) != "Mn")
    if lowercase:
        text = "".join(c.lower() for c in text)  # per character: no final-sigma rule
    return text


def bert_pre_tokenize(text: str) -> list[str]:
    """HF ``BertPreTokenizer``: whitespace separates (and is dropped); each punctuation
    character is a word of its own.

    >>> bert_pre_tokenize("don't stop!!")
    ['don', "'", 't', 'stop', '!', '!']
    """
    words, cur = [], []
    for c in text:
        if c in WHITE_SPACE or is_punctuation(c):
            if cur:
                words.append("".join(cur))
                cur = []
            if c not in WHITE_SPACE:
                words.append(c)
        else:
            cur.append(c)
    if cur:
        words.append("".join(cur))
    return words


def wordpiece(word: str, vocab: dict[str, int], *, unk_token: str = "[UNK]", prefix: str = "##",
              max_input_chars_per_word: int = 100) -> list[int]:
    """Greedy longest-match-first over the characters of one word.

    >>> wordpiece("unaffable", {"un": 0, "##aff": 1, "##able": 2, "[UNK]": 3})
    [0, 1, 2]
    """
    if len(word) > max_input_chars_per_word:  # counted in characters
        return [vocab[unk_token]]
    out, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):  # the longest candidate first
            piece = word[start:end] if start == 0 else prefix + word[start:end]
            if piece in vocab:
                out.append(vocab[piece])
                start = end
                break
        else:
            return [vocab[unk_token]]  # one failure spoils the whole word
    return out


def wordpiece_decode(tokens: list[str], *, prefix: str = "##", cleanup: bool = True) -> str:
    """HF's ``WordPiece`` decoder: "##" pieces glue to the previous token, others get a space;
    ``cleanup`` undoes BERT's spacing around punctuation and English contractions."""
    out = []
    for i, tok in enumerate(tokens):
        if i:
            tok = tok[len(prefix):] if tok.startswith(prefix) else " " + tok
        if cleanup:
            for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                         (" n't", "n't"), (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"),
                         (" 've", "'ve"), (" 're", "'re")):
                tok = tok.replace(a, b)
        out.append(tok)
    return "".join(out)


class RefWordPiece:
    """A BERT tokenizer.json (``model.type == "WordPiece"``), encoded the literal way.

    >>> bert = RefWordPiece.from_vocab(["[PAD]", "[UNK]", "un", "##aff", "##able", "!"])
    >>> bert.encode_ordinary("Unaffable!"), bert.decode([2, 3, 4, 5])
    ([2, 3, 4, 5], 'unaffable!')
    """

    def __init__(self, source: "str | Path | dict"):
        cfg = source if isinstance(source, dict) else json.loads(Path(source).read_text("utf-8"))
        model = cfg["model"]
        if model.get("type") != "WordPiece":
            raise ValueError(f"tokenizer.json: model type {model.get('type')!r} is not WordPiece")
        self.vocab: dict[str, int] = model["vocab"]
        self.unk_token = model.get("unk_token", "[UNK]")
        if self.unk_token not in self.vocab:
            raise ValueError(f"tokenizer.json: unk_token {self.unk_token!r} is not in the vocab")
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.max_chars = model.get("max_input_chars_per_word", 100)
        norm = cfg.get("normalizer")
        if norm is not None and norm.get("type") != "BertNormalizer":
            raise ValueError(f"tokenizer.json: normalizer {norm.get('type')!r} is not supported "
                             f"(BertNormalizer or none)")
        self.normalizer = norm
        pre = cfg.get("pre_tokenizer")
        if pre is None or pre.get("type") != "BertPreTokenizer":
            raise ValueError("tokenizer.json: WordPiece needs the BertPreTokenizer")
        self.decoder = cfg.get("decoder")
        self.added = {t["content"]: t for t in cfg.get("added_tokens", [])}
        for c, t in self.added.items():
            if t.get("normalized") or t.get("lstrip") or t.get("rstrip") or t.get("single_word"):
                raise ValueError(f"tokenizer.json: added token {c!r}: only normalized/lstrip/"
                                 f"rstrip/single_word = false is supported for WordPiece")
        self.special_tokens = {c: t["id"] for c, t in self.added.items() if t.get("special")}
        self.plain_added = {c: t["id"] for c, t in self.added.items() if not t.get("special")}
        self.id_to_token = {i: tok for tok, i in self.vocab.items()}
        self.id_to_token.update({t["id"]: c for c, t in self.added.items()})

    @classmethod
    def from_vocab(cls, tokens: list[str], *, lowercase: bool = True,
                   strip_accents: "bool | None" = None, handle_chinese_chars: bool = True,
                   clean_text: bool = True, unk_token: str = "[UNK]",
                   specials_: "tuple[str, ...]" = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
                   ) -> "RefWordPiece":
        """From a vocab.txt token list (id = line number), with BERT's default pipeline."""
        vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}
        return cls({
            "added_tokens": [{"id": vocab[s], "content": s, "special": True} for s in specials_
                             if s in vocab],
            "normalizer": {"type": "BertNormalizer", "clean_text": clean_text,
                           "handle_chinese_chars": handle_chinese_chars,
                           "strip_accents": strip_accents, "lowercase": lowercase},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": unk_token, "vocab": vocab,
                      "continuing_subword_prefix": "##", "max_input_chars_per_word": 100}})

    def normalize(self, text: str) -> str:
        n = self.normalizer
        if n is None:
            return text
        return bert_normalize(text, clean_text=n.get("clean_text", True),
                              handle_chinese_chars=n.get("handle_chinese_chars", True),
                              strip_accents=n.get("strip_accents"),
                              lowercase=n.get("lowercase", True))

    def encode_ordinary(self, text: str) -> list[int]:
        return self._encode(text, frozenset())

    def encode(self, text: str, *, allowed_special="none", disallowed_special="all") -> list[int]:
        allowed, disallowed = specials.normalize_special_args(
            self.special_tokens.keys(), () if allowed_special == "none" else allowed_special,
            disallowed_special)
        specials.check_disallowed(text, disallowed)
        return self._encode(text, allowed)

    def _encode(self, text: str, allowed: frozenset[str]) -> list[int]:
        out: list[int] = []
        text = specials.fix_surrogates(text)
        for seg, is_added in specials.split_specials(text, allowed | frozenset(self.plain_added)):
            if is_added:
                out.append(self.added[seg]["id"])
                continue
            for word in bert_pre_tokenize(self.normalize(seg)):
                out.extend(wordpiece(word, self.vocab, unk_token=self.unk_token,
                                     prefix=self.prefix, max_input_chars_per_word=self.max_chars))
        return out

    def decode(self, ids, *, skip_special_tokens: bool = True) -> str:
        tokens = [self.id_to_token[i] for i in ids if i in self.id_to_token
                  and not (skip_special_tokens and self.id_to_token[i] in self.special_tokens)]
        d = self.decoder
        if d is None:
            return " ".join(tokens)
        if d.get("type") != "WordPiece":
            raise ValueError(f"tokenizer.json: decoder {d.get('type')!r} is not supported")
        return wordpiece_decode(tokens, prefix=d.get("prefix", "##"),
                                cleanup=d.get("cleanup", True))
