"""Training's progress on stderr: one tqdm bar per phase (words, then merges), each with its rate
and, where the total is known, its ETA; and the verbose per-merge log."""

from __future__ import annotations

import sys

from ..bytelevel import spell


class Progress:
    """Phase bars: ``words`` (input bytes or documents), then ``merges``. Disabled: no-ops."""

    def __init__(self, enabled: bool, total: "int | None", unit: str):
        self.enabled = bool(enabled)
        self.bar = None
        self._done = 0
        if self.enabled:
            from tqdm import tqdm

            self._tqdm = tqdm
            self.bar = tqdm(total=total, unit=unit, unit_scale=unit == "B", desc="words",
                            file=sys.stderr, dynamic_ncols=True)

    def words(self, units: int, n_unique: int) -> None:
        if self.bar is not None:
            self.bar.update(units)
            self.bar.set_postfix(unique=n_unique, refresh=False)

    def start_merges(self, n_words: int, n_target: int) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = self._tqdm(total=n_target, unit="merge", desc="merges", file=sys.stderr,
                                  dynamic_ncols=True, mininterval=0.25)
            self.bar.set_postfix(words=n_words, refresh=False)
            self._done = 0

    def merge(self, done: int) -> None:
        if self.bar is not None and done - self._done >= 64:
            self.bar.update(done - self._done)
            self._done = done

    def abandon(self) -> None:
        if self.bar is not None:
            self.bar.leave = False
            self.bar.close()
            self.bar = None

    def close(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self._done)
            self.bar.close()
            self.bar = None


class MergeLog:
    """The verbose log: one line per merge on ``stream``, e.g.
    ``merge 1: 256 = 'Ġ' + 't' (b' t'), 48213 times`` (tokens in their byte-level spelling)."""

    def __init__(self, vocab, stream=None):
        self.vocab = vocab
        self.stream = stream if stream is not None else sys.stderr
        self.n = 0

    def _name(self, i: int) -> str:
        v = self.vocab
        if i in v.learned:
            return spell(v.token_bytes(i))
        return v.strings[i]

    def __call__(self, left: int, right: int, merged: int, count: int) -> None:
        self.n += 1
        v = self.vocab
        raw = v.token_bytes(merged) if merged in v.learned else v.strings[merged].encode()
        times = f", {count} times" if count >= 0 else ""  # (-1: a loop that keeps no counts)
        self.stream.write(f"merge {self.n}: {merged} = {self._name(left)!r} + "
                          f"{self._name(right)!r} ({raw!r}){times}\n")
