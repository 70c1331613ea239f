"""``gputok parity``: do two tokenizers give the same ids on a corpus, and how fast is each?

A side is ``kind:what``:

* ``gputok:cl100k_base`` / ``gputok:path/tokenizer.json`` (``gputok:...@numpy`` picks a backend)
* ``tiktoken:cl100k_base`` (tiktoken's own pattern and special tokens; when tiktoken cannot
  download the ranks, gputok's bundled copies of the same files are handed to it) or
  ``tiktoken:path.tiktoken`` (ranks + the ``.tiktoken.json`` sidecar gputok's export writes)
* ``hf:path/tokenizer.json`` (HF ``tokenizers``, ``add_special_tokens=False``)
* ``sp:path.model`` (sentencepiece)

Every document is encoded by both sides; a mismatch is reported with its location, the first
differing token position, both token sequences around it (ids and the bytes of each token) and
the text there. Each side's throughput is timed on each corpus (input file) after a warm-up batch.
The report is Markdown (stdout, or ``--report``), JSON (``--json``), and with the ``plot`` extra
a bar chart of throughput per corpus (``--plot chart.png``). Exit status 1 when anything differs.

>>> sides = [make_side("gputok:r50k_base"), make_side("gputok:r50k_base@numpy")]
>>> compare_docs(sides, ["hello world"])["mismatches"]
[]
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Callable

WINDOW = 4  # tokens shown on each side of the first difference


@dataclass
class Side:
    """One tokenizer under test: ``encode(texts) -> list of id lists``, ``piece(id) -> bytes``."""

    spec: str
    encode: Callable
    piece: Callable


def _gputok_side(spec, what, allowed):
    import os

    import gputok

    what, _, backend = what.partition("@")
    enc = gputok.load(what) if os.path.exists(what) else gputok.get_encoding(what)
    kw = {"allowed_special": allowed, "disallowed_special": ()}

    def encode(texts):
        ids, off = enc.encode_batch_arrays(texts, backend=backend or "auto", **kw)
        return [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]

    return Side(spec, encode, enc.decode_single_token_bytes)


def _bundled_ranks(name: str) -> dict:
    import base64
    import gzip
    from importlib import resources

    stem = {"gpt2": "r50k_base", "p50k_edit": "r50k_base", "p50k_base": "r50k_base"}.get(name, name)
    raw = gzip.decompress((resources.files("gputok") / "data" / f"{stem}.tiktoken.gz").read_bytes())
    ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in raw.splitlines() if ln)}
    if name.startswith("p50k"):
        ranks.update({b" " * n: 50255 + n for n in range(2, 26)})
    return ranks


def tiktoken_offline(name: str):
    """``tiktoken.get_encoding(name)``, or, when tiktoken cannot download its files, tiktoken's
    own constructor for ``name`` (its pattern and special tokens) fed gputok's bundled ranks."""
    import tiktoken

    try:
        return tiktoken.get_encoding(name)
    except Exception:
        pass
    import tiktoken_ext.openai_public as op

    saved = op.load_tiktoken_bpe, op.data_gym_to_mergeable_bpe_ranks
    op.load_tiktoken_bpe = lambda *a, **k: _bundled_ranks(name)
    op.data_gym_to_mergeable_bpe_ranks = lambda *a, **k: _bundled_ranks(name)
    try:
        if name not in op.ENCODING_CONSTRUCTORS:
            raise ValueError(f"tiktoken has no encoding {name!r} "
                             f"(it has: {', '.join(op.ENCODING_CONSTRUCTORS)})")
        return tiktoken.Encoding(**op.ENCODING_CONSTRUCTORS[name]())
    finally:
        op.load_tiktoken_bpe, op.data_gym_to_mergeable_bpe_ranks = saved


def _tiktoken_side(spec, what, allowed):
    import os

    import tiktoken

    if os.path.exists(what):
        from .loaders.tiktoken_file import read_ranks, read_sidecar

        meta = read_sidecar(what) or {}
        if "pat_str" not in meta:
            raise ValueError(f"{what}: no .tiktoken.json sidecar with the pattern next to it")
        enc = tiktoken.Encoding(meta.get("name", "x"), pat_str=meta["pat_str"],
                                mergeable_ranks=read_ranks(what),
                                special_tokens=meta.get("special_tokens", {}))
    else:
        enc = tiktoken_offline(what)
    allowed_t = "all" if allowed == "all" else set(allowed)

    def encode(texts):
        return enc.encode_batch(list(texts), allowed_special=allowed_t, disallowed_special=())

    return Side(spec, encode, enc.decode_single_token_bytes)


def _hf_side(spec, what, allowed):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(what)
    tok.no_truncation()
    tok.no_padding()

    def encode(texts):
        return [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)]

    def piece(i):
        return tok.decode([i], skip_special_tokens=False).encode("utf-8", "surrogatepass")

    return Side(spec, encode, piece)


def _sp_side(spec, what, allowed):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=what)

    def encode(texts):
        return sp.encode(list(texts))

    def piece(i):
        return sp.id_to_piece(i).encode("utf-8")

    return Side(spec, encode, piece)


_KINDS = {"gputok": _gputok_side, "tiktoken": _tiktoken_side, "hf": _hf_side, "sp": _sp_side}


def make_side(spec: str, *, allowed_special=frozenset()) -> Side:
    """A ``Side`` from ``kind:what`` (see the module docstring); ``ValueError`` on a bad spec.

    >>> make_side("gputok:cl100k_base").encode(["hello world"])
    [[15339, 1917]]
    """
    kind, sep, what = spec.partition(":")
    if not sep or kind not in _KINDS or not what:
        raise ValueError(f"{spec!r}: a side is KIND:WHAT with KIND one of {', '.join(_KINDS)} "
                         "(e.g. tiktoken:cl100k_base, hf:tokenizer.json, sp:m.model)")
    try:
        return _KINDS[kind](spec, what, allowed_special)
    except ImportError as e:
        raise ImportError(f"{spec}: {e}; pip install {'sentencepiece' if kind == 'sp' else kind}"
                          ) from None


def first_difference(a: list, b: list) -> "int | None":
    """Index of the first differing token (the shorter length when one is a prefix).

    >>> first_difference([1, 2, 3], [1, 5, 3]), first_difference([1], [1, 2]), first_difference([], [])
    (1, 1, None)
    """
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _mismatch(sides, text, ids_a, ids_b, where, k) -> dict:
    lo = max(0, k - WINDOW)
    prefix = b"".join(sides[0].piece(i) for i in ids_a[:k])
    char = len(prefix.decode("utf-8", "replace"))
    return {"where": where, "token": k, "char": char, "len_a": len(ids_a), "len_b": len(ids_b),
            "a": [[i, sides[0].piece(i).decode("utf-8", "backslashreplace")]
                  for i in ids_a[lo:k + WINDOW]],
            "b": [[i, sides[1].piece(i).decode("utf-8", "backslashreplace")]
                  for i in ids_b[lo:k + WINDOW]],
            "from_token": lo, "text": _printable(text[max(0, char - 40):char + 40])}


def _printable(text: str) -> str:
    """``text`` with any lone surrogate spelled ``\\udxxx`` (no UTF-8 form: the JSON and
    Markdown reports are UTF-8 files)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class Refused:
    """A document a side would not encode: its error, in words (a report line, not a crash)."""

    def __init__(self, e: Exception):
        self.why = f"{type(e).__name__}: {e}"


def _encode_each(side: Side, texts) -> list:
    """``side.encode(texts)``; when the batch fails, each document alone, so the ones the side
    refuses (HF ``tokenizers`` takes no str holding a lone surrogate, for one) become
    ``Refused`` and the others are still compared."""
    try:
        return side.encode(texts)
    except Exception:
        pass
    out = []
    for t in texts:
        try:
            out.append(side.encode([t])[0])
        except Exception as e:
            out.append(Refused(e))
    return out


def compare_docs(sides, texts, wheres=None, *, limit: int = 50) -> dict:
    """Encode ``texts`` with both sides; mismatches (at most ``limit`` kept, all counted; a
    document one side refuses is one, with that side's error) and each side's seconds."""
    out = {"docs": len(texts), "bytes": sum(len(t.encode("utf-8", "surrogatepass")) for t in texts),
           "seconds": [], "mismatches": [], "n_mismatches": 0}
    results = []
    for s in sides:
        _encode_each(s, texts[:8])  # warm-up: caches, lazy tables, JIT
        t0 = time.perf_counter()
        results.append(_encode_each(s, texts))
        out["seconds"].append(time.perf_counter() - t0)
    for d, (a, b) in enumerate(zip(*results)):
        w = wheres[d] if wheres else f"doc {d}"
        refused = [(s.spec, r.why) for s, r in zip(sides, (a, b)) if isinstance(r, Refused)]
        if refused:
            out["n_mismatches"] += 1
            if len(out["mismatches"]) < limit:
                out["mismatches"].append({"where": w, "refused": refused,
                                          "text": _printable(texts[d][:80])})
            continue
        a, b = list(a), list(b)
        k = first_difference(a, b)
        if k is None:
            continue
        out["n_mismatches"] += 1
        if len(out["mismatches"]) < limit:
            out["mismatches"].append(_mismatch(sides, texts[d], a, b, w, k))
    return out


def throughput_by_size(sides, texts, sizes_mb) -> list:
    """Seconds of each side on the corpus prefixes of about ``sizes_mb`` MB (each prefix whole
    documents; sizes above the corpus are dropped): ``[{"mb": ..., "seconds": [a, b]}]``."""
    sizes = [int(mb * 1e6) for mb in sorted(set(sizes_mb))]
    cum, n, out = 0, 0, []
    for target in sizes:
        while n < len(texts) and cum < target:
            cum += len(texts[n].encode("utf-8", "surrogatepass"))
            n += 1
        if out and out[-1]["docs"] == n:
            break  # the corpus is smaller than this size: its whole size was the last point
        secs = []
        for s in sides:
            t0 = time.perf_counter()
            s.encode(texts[:n])
            secs.append(time.perf_counter() - t0)
        out.append({"mb": cum / 1e6, "docs": n, "seconds": secs})
        if cum < target:
            break
    return out


def _read_corpus(path: str, field: str, max_bytes: int):
    from .corpus import location, read_batches, resolve_inputs

    sources = resolve_inputs([path], field=field)
    texts, wheres, size = [], [], 0
    for b in read_batches(sources, field=field, errors="replace", batch_bytes=1 << 20):
        batch = b.texts if isinstance(b.texts, list) else b.texts.to_pylist()
        for t, e in zip(batch, b.ends):
            texts.append(t)
            wheres.append(location(sources, e))
            size += len(t)
            if size >= max_bytes:
                return texts, wheres
    return texts, wheres


def markdown(report: dict) -> str:
    """The report as Markdown: a throughput table, then each mismatch."""
    a, b = report["sides"]
    lines = [f"# gputok parity: `{a}` vs `{b}`", "",
             f"| corpus | docs | MB | {a} MB/s | {b} MB/s | mismatched docs |",
             "|---|---:|---:|---:|---:|---:|"]
    for c in report["corpora"]:
        mb = c["bytes"] / 1e6
        rates = [f"{mb / s:.2f}" if s > 0 else "-" for s in c["seconds"]]
        lines.append(f"| {c['corpus']} | {c['docs']} | {mb:.2f} | {rates[0]} | {rates[1]} | "
                     f"{c['n_mismatches']} |")
    if any(c.get("sizes") for c in report["corpora"]):
        lines += ["", "| corpus | prefix MB | docs | " + f"{a} MB/s | {b} MB/s |",
                  "|---|---:|---:|---:|---:|"]
        for c in report["corpora"]:
            for p in c.get("sizes", []):
                r = [f"{p['mb'] / s:.2f}" if s > 0 else "-" for s in p["seconds"]]
                lines.append(f"| {c['corpus']} | {p['mb']:.2f} | {p['docs']} | {r[0]} | {r[1]} |")
        lines += ["", "(prefixes are timed after the full pass, with warm caches: a long job's "
                  "steady state; the first table is each side's first, cold pass)"]
    total = sum(c["n_mismatches"] for c in report["corpora"])
    lines += ["", "**identical ids on every document**" if not total else
              f"**{total} document(s) differ**", ""]
    for c in report["corpora"]:
        for m in c["mismatches"]:
            if "refused" in m:
                lines += [f"## {m['where']}: " + "; ".join(f"`{spec}` cannot encode it ({why})"
                                                          for spec, why in m["refused"]), "",
                          f"text there: `{m['text']!r}`", ""]
                continue
            lines += [f"## {m['where']}: first difference at token {m['token']} (character "
                      f"{m['char']}; {m['len_a']} vs {m['len_b']} tokens)", "",
                      f"text there: `{m['text']!r}`", "",
                      f"| side | tokens from #{m['from_token']} |", "|---|---|"]
            for name, toks in ((a, m["a"]), (b, m["b"])):
                shown = " ".join(f"{i}:{p!r}" for i, p in toks).replace("|", "\\|")
                lines.append(f"| {name} | {shown} |")
            lines.append("")
    return "\n".join(lines)


def plot(report: dict, path: str) -> None:
    """Throughput per corpus and side: lines over prefix sizes when ``--sizes`` was given, else
    bars (``pip install 'gputok[plot]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("--plot needs matplotlib: pip install 'gputok[plot]'") from None
    corpora = report["corpora"]
    if any(len(c.get("sizes", [])) > 1 for c in corpora):
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for c in corpora:
            name = c["corpus"].rsplit("/", 1)[-1]
            for k, side in enumerate(report["sides"]):
                pts = c.get("sizes", [])
                ax.plot([p["mb"] for p in pts], [p["mb"] / max(p["seconds"][k], 1e-9) for p in pts],
                        marker="o", linestyle="-" if k == 0 else "--", label=f"{side} · {name}")
        ax.set_xscale("log")
        ax.set_xlabel("corpus prefix (MB)")
        ax.set_ylabel("MB/s")
        ax.set_title("throughput per corpus and size")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return
    fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(corpora) + 2), 3.5))
    width = 0.38
    for k, side in enumerate(report["sides"]):
        xs = [i + (k - 0.5) * width for i in range(len(corpora))]
        ys = [c["bytes"] / 1e6 / s if s > 0 else 0 for c, s in
              ((c, c["seconds"][k]) for c in corpora)]
        ax.bar(xs, ys, width, label=side)
    ax.set_xticks(range(len(corpora)))
    ax.set_xticklabels([f"{c['corpus'].rsplit('/', 1)[-1]}\n{c['bytes'] / 1e6:.1f} MB"
                        for c in corpora])
    ax.set_ylabel("MB/s")
    ax.set_title("throughput per corpus")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def add_parser(sub) -> None:
    p = sub.add_parser("parity", help="compare two tokenizers' ids and speed on a corpus")
    p.add_argument("inputs", nargs="+", metavar="CORPUS", help="one corpus per file (.txt, "
                   ".jsonl(.gz/.zst), .parquet, .arrow)")
    p.add_argument("--a", required=True, metavar="SIDE", help="e.g. tiktoken:cl100k_base")
    p.add_argument("--b", default=None, metavar="SIDE",
                   help="e.g. gputok:cl100k_base (default: gputok with A's name)")
    p.add_argument("--field", default="text", help="JSON field / column holding the text")
    p.add_argument("--allowed-special", action="append", metavar="TOKEN",
                   help="special tokens encoded as control ids ('all'); others are text")
    p.add_argument("--max-mb", type=float, default=64.0, help="text read per corpus (64)")
    p.add_argument("--max-mismatches", type=int, default=20, help="mismatches shown per corpus")
    p.add_argument("--sizes", metavar="MB,MB,...", help="also time both sides on corpus "
                   "prefixes of these sizes, e.g. 0.1,1,10 (the chart then plots MB/s per size)")
    p.add_argument("--report", help="write the Markdown report here (default: stdout)")
    p.add_argument("--json", help="write the report as JSON here")
    p.add_argument("--plot", help="write a throughput chart here (.png/.svg; needs matplotlib)")
    p.set_defaults(func=run_parity)


def run_parity(args) -> int:
    vals = args.allowed_special or []
    allowed = "all" if "all" in vals else frozenset(vals)
    b_spec = args.b or "gputok:" + args.a.partition(":")[2]
    sides = [make_side(args.a, allowed_special=allowed), make_side(b_spec, allowed_special=allowed)]
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (fail before the work, not after)
        except ImportError:
            raise ImportError("--plot needs matplotlib: pip install 'gputok[plot]'") from None
    try:
        sizes = [float(x) for x in args.sizes.split(",")] if args.sizes else []
    except ValueError:
        raise ValueError(f"--sizes {args.sizes!r}: expected MB values like 0.1,1,10") from None
    report = {"sides": [args.a, b_spec], "corpora": []}
    for path in args.inputs:
        texts, wheres = _read_corpus(path, args.field, int(args.max_mb * 1e6))
        c = compare_docs(sides, texts, wheres, limit=args.max_mismatches)
        if sizes:
            c["sizes"] = throughput_by_size(sides, texts, sizes)
        report["corpora"].append({"corpus": path, **c})
    md = markdown(report)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(md + "\n")
    else:
        print(md)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
    if args.plot:
        plot(report, args.plot)
    bad = sum(c["n_mismatches"] for c in report["corpora"])
    if args.report:
        print(f"gputok parity: {sum(c['docs'] for c in report['corpora'])} docs, {bad} differ; "
              f"report in {args.report}", file=sys.stderr)
    return 1 if bad else 0
