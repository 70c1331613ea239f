"""Encode throughput of the new families: gputok vs sentencepiece and HF tokenizers.

Tokenizers (all from the pinned test data, or built from it):

    spm:mistral_v7      Mistral's v7 SentencePiece .model   peer: sentencepiece
    spm:botchan_bpe     sentencepiece's botchan model       peer: sentencepiece
                        (nmt_nfkc charsmap, no byte fallback)
    json:legacy         mistral_v3 as an SPM-style tokenizer.json (Prepend/Replace normaliser:
                        one BPE word per document)          peer: HF tokenizers
    json:metaspace      the same with a Metaspace pre-tokenizer that splits at "▁"
                                                            peer: HF tokenizers
    wordpiece:minilm    the MiniLM BERT tokenizer.json      peer: HF tokenizers
    unigram:botchan_unigram  sentencepiece's botchan Unigram .model   peer: sentencepiece
    unigram:xlmr        llama.cpp's XLM-R GGUF (250K Unigram pieces)  peer: sentencepiece on
                        the .model it was converted from
    json:t5             a T5-style Unigram tokenizer.json (Precompiled, WhitespaceSplit +
                        Metaspace) written from botchan's Unigram .model  peer: HF tokenizers
    json:deepseek_llm   DeepSeek-LLM's tokenizer.json (a Sequence of Split patterns: the native
                        pattern matcher)                    peer: HF tokenizers

(An SPM-style tokenizer.json converted from a .model is a different tokenizer: HF merges by
merge rank, sentencepiece by piece score, and they differ on a few documents in a hundred; so
each file is timed against its own library.)

Every peer runs in the same process on the same corpus. Exactness first: gputok's ids must equal
the family's own library (its 1-thread runner: sentencepiece or HF tokenizers) on every
document, or the run stops; every other peer (the library's batch API, and gigatoken, the
fastest exact peer, where it loads the file: ``Tokenizer.from_sentencepiece`` /
``Tokenizer(tokenizer.json)``) is checked the same way, and one that differs is reported with
its mismatches, not timed and in no ratio. Then each is timed (best of --repeat) and the ratios
printed. gputok is timed as ``bench_encode.py`` does: cold piece cache, 1 MB batches
sharing the cache, warm cache; and on the native CPU device where the segmenter has a device
form (WordPiece: ``encode_wordpiece.cu``, words cut on the host; SentencePiece:
``encode_spm.cu``), when a C++ compiler exists. ``bench_spm.py`` times SentencePiece models one
text at a time and decoding too.

    python bench/bench_families.py --kinds prose code multilingual --mb 4
    python bench/bench_families.py --record bench/results/families.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import _common
import numpy as np
import peers as bench_peers

import gputok  # noqa: E402  (path set up by _common)
import gputok.backends.native  # noqa: E402

TOKENIZERS = ("spm:mistral_v7", "spm:botchan_bpe", "json:legacy", "json:metaspace",
              "wordpiece:minilm", "unigram:botchan_unigram", "unigram:xlmr", "json:t5",
              "json:deepseek_llm")


def _setup(name: str, tmp: Path):
    """(gputok Encoding, encode kwargs, {peer label: batch function returning id lists})."""
    import families as F
    import testdata
    from tokenizers import Tokenizer

    threads = os.cpu_count() or 1
    kind, which = name.split(":")
    peers = {}
    if kind == "spm":
        data = F.model_source(which)
        path = tmp / f"{which}.model"
        path.write_bytes(data)
        _sp_peers(peers, F.spm_oracle(data), threads)
        _gigatoken(peers, "from_sentencepiece", path)
        return gputok.load(path), {"disallowed_special": ()}, peers
    if kind == "unigram":
        if which == "xlmr":
            from gputok.loaders.gguf import read_metadata

            path = testdata.family_path("llama_cpp_nomic-bert-moe")
            data = F.model_from_t5_gguf(read_metadata(path)[0])
        else:
            data = F.unigram_source(which)
            path = tmp / f"{which}.model"
            path.write_bytes(data)
        _sp_peers(peers, F.spm_oracle(data), threads)
        return gputok.load(path), {"disallowed_special": ()}, peers
    if kind == "json" and which == "t5":
        from test_precompiled import t5_json

        cfg = t5_json(F.unigram_source("botchan_unigram"))
        path = tmp / "t5.json"
    elif kind == "json" and which == "deepseek_llm":
        cfg = json.loads(testdata.family_path("deepseek_llm_tokenizer_json").read_text("utf-8"))
        path = tmp / "deepseek_llm.json"
    elif kind == "json":
        shape = "legacy" if which == "legacy" else "metaspace_split"
        cfg = F.spm_tokenizer_json(F.model_source("mistral_v3"), shape=shape)
        path = tmp / f"{which}.json"
    else:
        cfg = json.loads(testdata.family_path("minilm_tokenizer_json").read_text("utf-8"))
        path = tmp / "minilm.json"
    path.write_text(json.dumps(cfg), "utf-8")
    hf = Tokenizer.from_file(str(path))
    hf.no_truncation()
    hf.no_padding()
    peers["HF tokenizers 1 thread"] = lambda docs: [
        hf.encode(d, add_special_tokens=False).ids for d in docs]
    peers[f"HF tokenizers batch {threads} threads"] = lambda docs: [
        e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    _gigatoken(peers, None, path)
    _tokie(peers, path)
    return gputok.load(path), {"allowed_special": "all"}, peers


def _sp_peers(peers: dict, sp, threads: int) -> None:
    """sentencepiece one text at a time and its batch API on ``threads`` threads."""
    peers["sentencepiece 1 thread"] = lambda docs: [sp.encode(d) for d in docs]
    peers[f"sentencepiece batch {threads} threads"] = lambda docs: sp.encode(
        docs, num_threads=threads)


def _gigatoken(peers: dict, how: "str | None", path: Path) -> None:
    """Add gigatoken's batch API as a peer where it loads the file (it reads byte-level and
    byte-fallback BPE: no WordPiece, no SentencePiece model without byte fallback)."""
    try:
        import gigatoken

        tok = (getattr(gigatoken.Tokenizer, how)(str(path)) if how
               else gigatoken.Tokenizer(str(path)))
    except Exception as e:  # not installed, or a file it does not read: said, not timed
        print(f"  gigatoken: skipped for {path.name}: {type(e).__name__}: {str(e)[:120]}")
        return

    def batch(docs):
        layout = tok.encode_batch(docs).layout
        return np.asarray(layout.content.data), np.asarray(layout.offsets)
    peers[f"gigatoken batch {os.cpu_count() or 1} threads"] = batch


def _tokie(peers: dict, path: Path) -> None:
    """Add tokie's flat batch API as a peer where it loads the tokenizer.json (its
    ``encode_batch_flat``: ids and per-document counts as arrays, no per-document objects)."""
    try:
        import tokie

        tok = tokie.Tokenizer.from_json(str(path))
    except Exception as e:  # not installed, or a file it does not read: said, not timed
        print(f"  tokie: skipped for {path.name}: {type(e).__name__}: {str(e)[:120]}")
        return

    def batch(docs):
        ids, lens = tok.encode_batch_flat(docs, add_special_tokens=False)
        off = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        return np.asarray(ids), off
    peers[f"tokie batch {os.cpu_count() or 1} threads"] = batch


def run(args) -> dict:
    results = {"machine": _common.machine(), "date": time.strftime("%Y-%m-%d"),
               "command": " ".join(sys.argv), "commit": _common.commit(), "tokenizers": {}}
    tmp = Path(tempfile.mkdtemp())
    corpora = {kind: _common.corpus(kind, args.mb) for kind in args.kinds}
    native = None
    if gputok.backends.native.available()[0]:
        native = gputok.backends.native.create()
    for name in args.tokenizers:
        t0 = time.perf_counter()
        enc, kw, peers = _setup(name, tmp)
        load_s = time.perf_counter() - t0
        print(f"\n== {name} ({enc.model.segmenter.name}; gputok.load {load_s:.2f} s)")
        results["tokenizers"][name] = {"load_s": round(load_s, 3), "kinds": {}}
        for kind, docs in corpora.items():
            mb = sum(len(d.encode()) for d in docs) / 1e6
            batches, cur, size = [], [], 0
            for d in docs:
                cur.append(d)
                size += len(d)
                if size >= 1 << 20:
                    batches.append(cur)
                    cur, size = [], 0
            batches += [cur] if cur else []

            def cold():
                enc.model.piece_cache.clear()
                return enc.encode_batch_arrays(docs, backend="numpy", **kw)

            def stream():
                enc.model.piece_cache.clear()
                for b in batches:
                    enc.encode_batch_arrays(b, backend="numpy", **kw)

            def warm():
                return enc.encode_batch_arrays(docs, backend="numpy", **kw)

            ids, off = cold()
            oracle, *others = peers
            why = bench_peers.inexact((ids, off), bench_peers.per_doc(peers[oracle](docs)), docs)
            if why:
                raise SystemExit(f"{name} {kind}: gputok differs from {oracle}: {why}; not "
                                 "timing")
            ours = [ids[a:b] for a, b in zip(off[:-1], off[1:])]
            exact = {oracle: peers[oracle]}
            for label in others:
                why = bench_peers.inexact(peers[label](docs), ours, docs)
                if why:
                    print(f"  {label}: NOT EXACT on {kind}, not timed and in no ratio: "
                          f"{why.replace('tiktoken', oracle)}")
                else:
                    exact[label] = peers[label]
            row = {"docs": len(docs), "MB": round(mb, 2), "tokens": int(len(ids)), "MB/s": {}}
            timings = {"gputok numpy (cold cache)": cold, "gputok numpy (1 MB batches)": stream,
                       "gputok numpy (warm cache)": warm}
            if enc.model.segmenter.device is not None and native is not None:
                def on_native():
                    return enc.encode_batch_arrays(docs, backend=native, **kw)

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the host word split: counted, expected
                    n_ids, n_off = on_native()
                if not (np.array_equal(n_ids, ids) and np.array_equal(n_off, off)):
                    raise SystemExit(f"{name} {kind}: the native backend differs; not timing")
                timings[f"gputok native ({native.dev.name})"] = on_native
            timings.update({k: (lambda fn=fn: fn(docs)) for k, fn in exact.items()})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # after a warm-up each, rounds of every runner in turn
                for label, t in _common.best_interleaved(timings, args.repeat).items():
                    row["MB/s"][label] = mb / t
            results["tokenizers"][name]["kinds"][kind] = row
            print(f"{kind}: {len(docs)} docs, {mb:.2f} MB, {len(ids)} tokens, ids identical "
                  f"for gputok and every peer timed ({', '.join(exact)})")
            base = row["MB/s"]["gputok numpy (1 MB batches)"]
            print(f"  {'':<40} {'MB/s':>8}  {'gputok 1 MB batches / this':>27}")
            for label, v in row["MB/s"].items():
                print(f"  {label:<40} {v:8.2f}  {base / v:26.2f}x")
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizers", nargs="+", default=list(TOKENIZERS), choices=TOKENIZERS)
    p.add_argument("--kinds", nargs="+", default=["prose", "code", "multilingual"])
    p.add_argument("--mb", type=float, default=2.0, help="MB per corpus kind")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--record", help="write the benchmark's record here (bench/README.md), "
                                    "e.g. bench/results/families.md")
    args = p.parse_args()
    with _common.recording(args.record, "bench_families.py", "SentencePiece, SPM-style, Unigram, "
                           "WordPiece and pattern-matcher encode throughput vs their own libraries and gigatoken",
                           ["sentencepiece", "tokenizers", "gigatoken", "tokie"]) as rec:
        print(f"machine: {_common.machine()}")
        res = rec["data"] = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
