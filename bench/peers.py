"""The peers the encode benchmarks measure gputok against, built one way for every script.

The bar is the fastest exact tools on the same machine: **gigatoken** (its own batch API,
``Tokenizer.from_tiktoken(path).encode_batch``, and its tiktoken-compatible mode,
``.as_tiktoken().encode_ordinary_batch``), **toktok-rs** (``import toktok``:
``toktok._encoding(name).encode_batch_to_numpy(docs, threads)``) and **quicktok-v1** (``import
quicktok``: ``quicktok.get_encoding(name).encode_batch(docs, threads)``). tiktoken is the
reference whose ids everyone must equal; riptoken and HF ``tokenizers`` are measured where a
script always measured them. (The packages named plain ``toktok`` and ``quicktok`` on the
index are other projects: a word tokenizer and a minbpe-style trainer, with no tiktoken ids.)

``build(name, encoding)`` gives a ``Peer`` with ``batch(docs)`` (every core unless the script
says otherwise) and ``one(text)``, or raises ``Unavailable`` saying why (not installed, no such
encoding). ``inexact(out, reference)`` compares a peer's ids with tiktoken's on the benchmark's
own documents; every script calls it before timing a peer, prints the mismatches of an inexact
peer and leaves that peer out of its ratios.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import _common

THREADS = os.cpu_count() or 1
#: the fastest exact peers: every encode benchmark runs them where the encoding exists for them
FASTEST = ("gigatoken", "gigatoken tiktoken mode", "toktok-rs", "quicktok-v1")
#: distribution -> import name, for the versions a record lists
DISTRIBUTIONS = {"tiktoken": "tiktoken", "gigatoken": "gigatoken", "toktok-rs": "toktok",
                 "quicktok-v1": "quicktok", "riptoken": "riptoken", "tokenizers": "tokenizers"}
# the pre-tokenizer gigatoken must be told for a ranks file it cannot name from the file name
_GIGATOKEN_PRETOKENIZER = {"r50k_base": "gpt2", "p50k_base": "gpt2", "cl100k_base": "cl100k",
                           "o200k_base": "o200k"}


class Unavailable(Exception):
    """This peer cannot run here for this encoding (the message says why)."""


@dataclass
class Peer:
    name: str
    dist: str  # the distribution whose version a record lists
    batch: Callable  # docs -> per-document ids (sequences, or one (ids, offsets) pair)
    one: Callable  # text -> ids


def _need(dist: str) -> None:
    """The distribution must be installed under its own name: ``import toktok`` also finds the
    unrelated ``toktok`` package, which has no tiktoken encodings."""
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise Unavailable(f"not installed (pip install {dist})") from None


def _ranks_file(encoding: str) -> Path:
    """The encoding's ranks as a .tiktoken file: the test data's, or for p50k_base (no file of
    its own there) the oracle's ranks written once to the temporary directory."""
    import testdata

    if encoding in ("r50k_base", "cl100k_base", "o200k_base"):
        return testdata.vocab_path(encoding)
    path = Path(tempfile.gettempdir()) / f"gputok-bench-{encoding}.tiktoken"
    if not path.exists():
        ranks = _common.tiktoken_for(encoding)._mergeable_ranks
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r
                                 for t, r in sorted(ranks.items(), key=lambda kv: kv[1])))
        tmp.replace(path)
    return path


def build(name: str, encoding: str, *, threads: int = THREADS,
          hf_json: "str | None" = None) -> Peer:
    """The peer ``name`` for ``encoding``; raises ``Unavailable``."""
    if name == "tiktoken":
        tk = _common.tiktoken_for(encoding)
        return Peer(name, "tiktoken", lambda docs: tk.encode_ordinary_batch(
            docs, num_threads=threads), tk.encode_ordinary)
    if name.startswith("gigatoken"):
        _need("gigatoken")
        import gigatoken

        if encoding not in _GIGATOKEN_PRETOKENIZER:
            raise Unavailable(f"no gigatoken pre-tokenizer for {encoding}")
        tok = gigatoken.Tokenizer.from_tiktoken(
            _ranks_file(encoding), pretokenizer=_GIGATOKEN_PRETOKENIZER[encoding])
        if name == "gigatoken tiktoken mode":
            compat = tok.as_tiktoken()
            return Peer(name, "gigatoken", compat.encode_ordinary_batch, compat.encode_ordinary)

        def batch(docs):  # an awkward array: one flat id buffer plus offsets, read as they are
            layout = tok.encode_batch(docs).layout
            return np.asarray(layout.content.data), np.asarray(layout.offsets)
        return Peer(name, "gigatoken", batch, tok.encode)
    if name == "toktok-rs":
        _need("toktok-rs")
        import toktok

        try:
            enc = toktok._encoding(encoding)
        except KeyError as e:
            raise Unavailable(str(e).strip("'\"")) from None
        return Peer(name, "toktok-rs", lambda docs: enc.encode_batch_to_numpy(docs, threads),
                    enc.encode_ordinary)
    if name == "quicktok-v1":
        _need("quicktok-v1")
        import quicktok

        try:
            enc = quicktok.get_encoding(encoding)
        except (RuntimeError, KeyError, ValueError) as e:
            raise Unavailable(f"no bundled {encoding} ({e})") from None
        return Peer(name, "quicktok-v1", lambda docs: enc.encode_batch(docs, threads, False),
                    enc.encode_ordinary)
    if name == "riptoken":
        _need("riptoken")
        import riptoken

        tk = _common.tiktoken_for(encoding)
        core = riptoken.CoreBPE(tk._mergeable_ranks, tk._special_tokens, tk._pat_str)
        return Peer(name, "riptoken", core.encode_ordinary_batch, core.encode_ordinary)
    if name == "HF tokenizers":
        if importlib.util.find_spec("tokenizers") is None:
            raise Unavailable("not installed (pip install tokenizers)")
        from tokenizers import Tokenizer

        if hf_json is None:
            raise Unavailable("needs the encoding's tokenizer.json export")
        hf = Tokenizer.from_file(str(hf_json))
        fast = getattr(hf, "encode_batch_fast", hf.encode_batch)
        return Peer(name, "tokenizers",
                    lambda docs: [e.ids for e in fast(docs, add_special_tokens=False)],
                    lambda text: hf.encode(text, add_special_tokens=False).ids)
    raise ValueError(f"unknown peer {name!r}")


def per_doc(out) -> list:
    """A batch result as one id sequence per document: ``(ids, offsets)`` pairs are sliced."""
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], np.ndarray):
        ids, off = out
        return [ids[off[i]:off[i + 1]] for i in range(len(off) - 1)]
    return list(out)


def inexact(out, reference: list, docs: "list[str] | None" = None) -> "str | None":
    """None when ``out`` (a batch result) gives ``reference``'s ids for every document, else
    what differs: how many documents, and the first (with its text's start when ``docs``)."""
    got = per_doc(out)
    if len(got) != len(reference):
        return f"{len(got)} results for {len(reference)} documents"
    bad = [i for i, (a, b) in enumerate(zip(got, reference))
           if not np.array_equal(np.asarray(a, np.int64), np.asarray(b, np.int64))]
    if not bad:
        return None
    where = f"document {bad[0]}" + (f" {docs[bad[0]][:60]!r}" if docs else "")
    return (f"ids differ from tiktoken's on {len(bad)} of {len(reference)} documents "
            f"(first: {where})")


def checked(names, encoding: str, docs: list, reference: list, **kw) -> dict:
    """``{name: Peer}`` of the peers that run here and give the reference ids on ``docs``;
    prints why each other one is left out (not available, or inexact: not timed, not in any
    ratio)."""
    ok = {}
    for name in names:
        try:
            peer = build(name, encoding, **kw)
            why = inexact(peer.batch(docs), reference, docs)
        except Unavailable as e:
            print(f"  {name}: skipped: {e}")
            continue
        except Exception as e:  # a peer that fails on these documents is as good as inexact
            why = f"failed: {type(e).__name__}: {str(e)[:200]}"
        if why:
            print(f"  {name}: NOT EXACT, not timed and left out of the ratios: {why}")
        else:
            ok[name] = peer
    return ok
