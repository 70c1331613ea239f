"""The ``gputok`` command: encode corpora to .npy shards, inspect tokenizations, report backends.

    gputok encode --encoding cl100k_base corpus/*.jsonl -o out/
    gputok show --encoding o200k_base "Hello world"
    gputok train --vocab-size 32000 --pattern cl100k corpus/*.jsonl -o tokenizer.json
    gputok info
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _encoding(args):
    import gputok

    if args.encoding and args.tokenizer:
        raise ValueError("give --encoding NAME or --tokenizer FILE, not both")
    if args.tokenizer:
        return gputok.load(args.tokenizer)
    return gputok.get_encoding(args.encoding or "cl100k_base")


def cmd_encode(args) -> int:
    from tqdm import tqdm

    from .specials import DisallowedSpecialError

    from .backends import get_backend
    from .corpus import iter_documents, total_input_bytes
    from .shards import ShardWriter

    enc = _encoding(args)
    backend = get_backend(args.backend)
    inputs = [str(Path(p)) for p in args.inputs]
    meta = {"encoding": enc.name, "inputs": inputs, "field": args.field,
            "append_eot": bool(args.append_eot), "backend": backend.name}
    writer = ShardWriter(args.output, meta=meta, dtype=enc.id_dtype,
                         shard_tokens=args.shard_tokens, resume=args.resume,
                         overwrite=args.overwrite)
    skip = writer.docs_done
    allowed = "all" if args.allowed_special == "all" else frozenset(args.allowed_special or ())
    disallowed = () if args.special_as_text else "all"
    eot = enc.eot_token if args.append_eot else None

    total = total_input_bytes(inputs)
    bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="encode",
               disable=args.quiet or None, file=sys.stderr, dynamic_ncols=True)
    docs = n_bytes = n_tokens = 0
    t0 = time.perf_counter()
    batch: list[str] = []
    where: list[str] = []
    batch_size = pending_progress = 0

    def run_batch():
        nonlocal docs, n_bytes, n_tokens, batch, batch_size, where
        try:
            ids, offsets = enc.encode_batch_arrays(batch, allowed_special=allowed,
                                                   disallowed_special=disallowed, backend=backend)
        except DisallowedSpecialError as e:
            writer.flush()  # keep every finished batch: --resume continues from here
            raise ValueError(f"{where[e.doc]}: the text contains the special token {e.token!r}; "
                             f"pass --special-as-text to encode it as plain text, or "
                             f"--allowed-special {e.token} to encode it as the control token") from None
        if eot is not None:
            ids, offsets = _append(ids, offsets, eot)
        writer.add(ids, offsets)
        docs += len(batch)
        n_bytes += batch_size
        n_tokens += len(ids)
        bar.set_postfix(docs=docs, tokens=n_tokens, refresh=False)
        batch, batch_size, where = [], 0, []

    seen = 0
    for doc, consumed, loc in iter_documents(inputs, field=args.field, errors=args.errors):
        pending_progress += consumed
        if doc is not None:
            seen += 1
            if seen > skip:
                batch.append(doc)
                where.append(loc)
                batch_size += len(doc.encode("utf-8", "surrogatepass"))
        if batch_size >= args.batch_bytes:
            run_batch()
            bar.update(pending_progress)
            pending_progress = 0
    if batch:
        run_batch()
    bar.update(pending_progress)
    writer.close()
    bar.close()
    dt = time.perf_counter() - t0
    resumed = f" (resumed after {skip} docs)" if skip else ""
    print(f"gputok encode: {docs} docs, {n_bytes / 1e6:.2f} MB, {n_tokens} tokens "
          f"({enc.name}, {backend.name}) in {dt:.2f} s = {n_bytes / 1e6 / max(dt, 1e-9):.2f} MB/s"
          f"{resumed}; {len(writer.shards)} shard(s) in {args.output}")
    return 0


def _append(ids, offsets, eot):
    import numpy as np

    lens = np.diff(offsets)
    out = np.empty(len(ids) + len(lens), dtype=ids.dtype)
    new_off = offsets + np.arange(len(offsets))
    ends = new_off[1:] - 1
    mask = np.ones(len(out), dtype=bool)
    mask[ends] = False
    out[mask] = ids
    out[ends] = eot
    return out, new_off


def cmd_show(args) -> int:
    enc = _encoding(args)
    text = " ".join(args.text) if args.text else sys.stdin.read()
    ids = enc.encode(text, allowed_special="all" if args.allowed_special == "all" else
                     frozenset(args.allowed_special or ()))
    print(f"{len(ids)} tokens ({enc.name})")
    for i in ids:
        print(f"{i:>8}  {enc.decode_single_token_bytes(i)!r}")
    return 0


def cmd_info(args) -> int:
    import platform

    import numpy

    import gputok
    from .backends import availability

    print(f"gputok {gputok.__version__} (python {platform.python_version()}, numpy "
          f"{numpy.__version__})")
    print("backends:")
    for name, (ok, why) in availability().items():
        print(f"  {name:<6} {'available' if ok else 'unavailable'}: {why}")
    print(f"encodings: {', '.join(gputok.list_encoding_names())}")
    return 0


def cmd_train(args) -> int:
    from . import train as train_mod
    from .export import save_hf_json, save_tiktoken

    out = Path(args.output)
    if out.suffix not in (".json", ".tiktoken"):
        raise ValueError(f"-o {out}: the output must end with .json (HF tokenizer.json) or "
                         ".tiktoken (ranks + a .tiktoken.json sidecar with pattern and specials)")
    if not out.parent.is_dir():
        raise ValueError(f"-o {out}: no such directory {out.parent}")
    inputs = [Path(p) for p in args.inputs]
    t0 = time.perf_counter()
    try:
        enc = train_mod.train_bpe(inputs, vocab_size=args.vocab_size, pattern=args.pattern,
                                  special_tokens=args.special or (),
                                  min_frequency=args.min_frequency, backend=args.backend,
                                  name=args.name or out.name.split(".")[0],
                                  progress=not args.quiet, field=args.field, errors=args.errors)
    except KeyboardInterrupt:
        print(f"gputok: interrupted; {out} was not written", file=sys.stderr)
        return 130
    (save_tiktoken if out.suffix == ".tiktoken" else save_hf_json)(enc, out)
    dt = time.perf_counter() - t0
    st = train_mod.last_stats
    n_bytes = sum(p.stat().st_size for p in inputs)
    rate = st.n_merges / st.merges_s if st.merges_s > 0 else 0.0
    print(f"gputok train: {st.vocab_size} tokens ({st.n_merges} merges) from "
          f"{n_bytes / 1e6:.2f} MB, {st.n_words} unique words, in {dt:.2f} s (words "
          f"{st.words_s:.2f} s, merges {st.merges_s:.2f} s = {rate:.0f} merges/s, {st.backend})"
          f" -> {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gputok", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def vocab_args(sp):
        sp.add_argument("--encoding", "-e", help="named encoding (default cl100k_base)")
        sp.add_argument("--tokenizer", help="a tokenizer.json or .tiktoken file instead")
        sp.add_argument("--allowed-special", nargs="*", metavar="TOKEN",
                        help="special tokens to encode as control ids ('all' for every one)")

    e = sub.add_parser("encode", help="encode .txt/.jsonl files into .npy shards")
    vocab_args(e)
    e.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt (one doc per file) or "
                   ".jsonl (one doc per line), optionally .gz")
    e.add_argument("-o", "--output", required=True, help="output directory")
    e.add_argument("--field", default="text", help="JSON field holding the text (default: text)")
    e.add_argument("--backend", default="auto", choices=["auto", "numpy", "cuda", "metal"])
    e.add_argument("--errors", default="strict", choices=["strict", "replace"],
                   help="invalid UTF-8 in input: fail (default) or decode as U+FFFD")
    e.add_argument("--special-as-text", action="store_true",
                   help="encode special-token text found in documents as plain text "
                        "(default: such documents are an error)")
    e.add_argument("--append-eot", action="store_true", help="end every document with <eot>")
    e.add_argument("--batch-bytes", type=int, default=8 << 20, help="text per batch")
    e.add_argument("--shard-tokens", type=int, default=1 << 27, help="tokens per shard")
    e.add_argument("--resume", action="store_true", help="continue an interrupted job")
    e.add_argument("--overwrite", action="store_true", help="replace an existing output")
    e.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    e.set_defaults(func=cmd_encode)

    s = sub.add_parser("show", help="show how a text is tokenized")
    vocab_args(s)
    s.add_argument("text", nargs="*", help="text (default: stdin)")
    s.set_defaults(func=cmd_show)

    t = sub.add_parser("train", help="train a byte-level BPE vocabulary (HF BpeTrainer's rule)")
    t.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt (one doc per file) or "
                   ".jsonl (one doc per line), optionally .gz")
    t.add_argument("-o", "--output", required=True,
                   help="tokenizer.json to write (or a .tiktoken file + .tiktoken.json sidecar)")
    t.add_argument("--vocab-size", type=int, required=True,
                   help="final vocabulary size, the 256 bytes and special tokens included")
    t.add_argument("--pattern", default="cl100k",
                   help="pre-tokenizer: gpt2, cl100k, o200k or a regex (default cl100k)")
    t.add_argument("--special", action="append", metavar="TOKEN",
                   help="a special token (repeat for more); they get ids 0, 1, ...")
    t.add_argument("--min-frequency", type=int, default=2,
                   help="stop when the best pair occurs fewer times (default 2)")
    t.add_argument("--field", default="text", help="JSON field holding the text (default: text)")
    t.add_argument("--errors", default="strict", choices=["strict", "replace"],
                   help="invalid UTF-8 in input: fail (default) or decode as U+FFFD")
    t.add_argument("--backend", default="auto", choices=["auto", "numpy", "cuda", "metal"])
    t.add_argument("--name", help="the encoding's name (default: the output file's stem)")
    t.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    t.set_defaults(func=cmd_train)

    i = sub.add_parser("info", help="version, backends and why unavailable ones are")
    i.set_defaults(func=cmd_info)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "allowed_special", None) == ["all"]:
        args.allowed_special = "all"
    try:
        return args.func(args)
    except BrokenPipeError:  # `gputok show ... | head`
        sys.stderr.close()
        return 0
    except (ValueError, KeyError, FileNotFoundError, RuntimeError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"gputok: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gputok: interrupted; finished shards are kept (use --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
