"""HF ``tokenizer.json`` decoder chains: ``HFDecoder`` (``Replace``, ``ByteFallback``, ``Fuse``,
``Strip``, ``Metaspace``, ``WordPiece``) over the tokens of the ids, special tokens skipped as
``Tokenizer.decode`` does by default; ``ByteFallback`` turns a byte run that is not valid UTF-8
into one U+FFFD per byte of the run. ``FamilyStreamDecoder`` streams any such decoder.

``decode_bytes`` gives the same text before any replacement (invalid byte runs as their raw
bytes); ``decode(ids, errors="strict")`` raises where they are not valid.
"""

from __future__ import annotations

from ...decode import as_int_list

def _byte_token(tok: str) -> "int | None":
    """HF's ByteFallback test: 6 UTF-8 bytes, "<0x" + two hex digits + ">" (Rust's
    ``from_str_radix`` also takes "<0x+A>")."""
    if len(tok) != 6 or not tok.startswith("<0x") or not tok.endswith(">"):
        return None
    digits = tok[3:5]
    if digits.startswith("+"):
        digits = digits[1:]
    if not digits or any(c not in "0123456789abcdefABCDEF" for c in digits):
        return None
    return int(digits, 16)


class HFDecoder:
    """An HF decoder chain; ``tokens``: id -> token string; ``skip``: ids not decoded
    (special tokens); unknown ids are skipped, as HF does.

    >>> d = HFDecoder({0: "▁a", 1: "<0xC3>", 2: "<0xA9>"}, {"type": "Sequence", "decoders": [
    ...     {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    ...     {"type": "ByteFallback"}, {"type": "Fuse"},
    ...     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})
    >>> d.decode([0, 1, 2])
    'aé'
    """

    def __init__(self, tokens: dict, spec: "dict | None", *, skip=frozenset(),
                 n_vocab: "int | None" = None, where: str = "tokenizer.json"):
        self.tokens = tokens
        self.spec = spec
        self.skip = frozenset(skip)
        self.n_vocab = n_vocab if n_vocab is not None else max(tokens, default=-1) + 1
        check_chain(spec, where)

    def decode(self, tokens, errors: str = "replace") -> str:
        ids = as_int_list(tokens)
        toks = [self.tokens[i] for i in ids if i in self.tokens and i not in self.skip]
        if self.spec is None:
            return " ".join(toks)
        if errors == "replace":
            return "".join(run_chain(self.spec, toks, "hf"))
        text = "".join(run_chain(self.spec, toks, "raw"))
        raw = text.encode("utf-8", "surrogateescape")
        return raw.decode("utf-8", errors) if errors != "surrogateescape" else text

    def decode_bytes(self, tokens) -> bytes:
        return self.decode(tokens, "surrogateescape").encode("utf-8", "surrogateescape")

    def is_byte(self, i: int) -> bool:
        t = self.tokens.get(i)
        return t is not None and _byte_token(t) is not None

    def stream(self, errors: str = "replace") -> "FamilyStreamDecoder":
        return FamilyStreamDecoder(self, self.is_byte, errors)


_CHAIN = ("Sequence", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace", "WordPiece")


def check_chain(spec, where: str) -> None:
    if spec is None:
        return
    kind = spec.get("type")
    if kind not in _CHAIN:
        raise ValueError(f"{where}: decoder {kind!r} is not supported (supported: "
                         f"{', '.join(_CHAIN)})")
    if kind == "Sequence":
        for sub in spec.get("decoders", []):
            check_chain(sub, where)
    if kind == "Replace" and "String" not in (spec.get("pattern") or {}):
        raise ValueError(f"{where}: decoder Replace with a regex pattern is not supported")


def run_chain(spec: dict, toks: list, mode: str) -> list:
    """One decoder of the chain on a list of token strings. ``mode``: "hf" (invalid byte runs
    become U+FFFD per byte) or "raw" (they stay bytes, as lone surrogates: surrogateescape)."""
    kind = spec["type"]
    if kind == "Sequence":
        for sub in spec.get("decoders", []):
            toks = run_chain(sub, toks, mode)
        return toks
    if kind == "Replace":
        a = spec["pattern"]["String"]
        return [t.replace(a, spec["content"]) for t in toks] if a else toks
    if kind == "Fuse":
        return ["".join(toks)]
    if kind == "Strip":
        c, start, stop = spec["content"], spec.get("start", 0), spec.get("stop", 0)
        out = []
        for t in toks:
            a = 0
            while a < min(start, len(t)) and t[a] == c:
                a += 1
            b = len(t)
            while len(t) - b < stop and b > a and t[b - 1] == c:
                b -= 1
            out.append(t[a:b])
        return out
    if kind == "ByteFallback":
        return _byte_fallback(toks, mode)
    if kind == "Metaspace":
        rep = spec.get("replacement", "\u2581")
        scheme = spec.get("prepend_scheme", "always")
        if spec.get("add_prefix_space") is False:
            scheme = "never"
        # every replacement character of the *first* token is dropped (HF 0.23)
        return [t.replace(rep, "" if i == 0 and scheme != "never" else " ")
                for i, t in enumerate(toks)]
    if kind == "WordPiece":
        return [wordpiece_join(toks, spec.get("prefix", "##"), spec.get("cleanup", True))]
    raise ValueError(f"decoder {kind!r} is not supported")


def _byte_fallback(toks: list, mode: str) -> list:
    out: list = []
    run = bytearray()

    def flush():
        if run:
            try:
                out.append(run.decode("utf-8"))
            except UnicodeDecodeError:
                if mode == "hf":
                    out.extend("\ufffd" for _ in run)
                else:
                    out.append(run.decode("utf-8", "surrogateescape"))
            run.clear()

    for t in toks:
        b = _byte_token(t)
        if b is None:
            flush()
            out.append(t)
        else:
            run.append(b)
    flush()
    return out


_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
            (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"),
            (" 're", "'re"))


def wordpiece_join(toks: list, prefix: str = "##", cleanup: bool = True) -> str:
    """HF's WordPiece decoder: a ``prefix`` token glues to the previous one, the others get a
    space; ``cleanup`` undoes BERT's spacing of punctuation and English contractions (per
    token, as HF applies it).

    >>> wordpiece_join(["un", "##aff", "##able", "!"])
    'unaffable!'
    """
    out = []
    for i, t in enumerate(toks):
        if i:
            t = t[len(prefix):] if t.startswith(prefix) else " " + t
        if cleanup:
            for a, b in _CLEANUP:
                t = t.replace(a, b)
        out.append(t)
    return "".join(out)


class FamilyStreamDecoder:
    """``Encoding.stream_decoder`` for families with a decoder: every ``feed`` returns the new
    text of ``decode(all ids so far)``, holding back a trailing run of byte tokens (it may still
    become a character). Each call re-decodes the ids so far (O(length) per call: fine for
    generation, where the leading-space and byte-run rules need the context)."""

    def __init__(self, detok, is_byte, errors: str = "replace"):
        self.detok, self.is_byte, self.errors = detok, is_byte, errors
        self.ids: list = []
        self.out = 0  # characters of decode(self.ids[:done]) already returned
        self.done = 0

    def feed(self, tokens) -> str:
        self.ids.extend(as_int_list(list(tokens)) if not isinstance(tokens, list) else tokens)
        stable = len(self.ids)
        while stable > self.done and self.is_byte(self.ids[stable - 1]):
            stable -= 1
        return self._emit(stable)

    def _emit(self, upto: int) -> str:
        text = self.detok.decode(self.ids[:upto], self.errors)
        new = text[self.out:]
        self.out = len(text)
        self.done = upto
        return new

    def flush(self) -> str:
        new = self._emit(len(self.ids))
        self.ids, self.out, self.done = [], 0, 0
        return new
