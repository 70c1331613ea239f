"""``gputok train``: a byte-level BPE vocabulary (HF BpeTrainer's rule) or a SentencePiece BPE
model from corpus files, written atomically (an interrupted run leaves no half-written file).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from .train import _backend_names as train_backend_names


def add_parser(sub, input_args) -> None:
    """The ``train`` subcommand on ``sub`` (``input_args`` adds --include/--exclude)."""
    t = sub.add_parser("train", help="train a byte-level BPE vocabulary (HF BpeTrainer's rule)")
    t.add_argument("inputs", nargs="+", metavar="INPUT", help=".txt (one doc per file), "
                   ".jsonl (one doc per line), .parquet / .arrow (a string column), optionally "
                   ".gz; directories and globs")
    t.add_argument("-o", "--output", required=True,
                   help="tokenizer.json to write (or a .tiktoken file + .tiktoken.json sidecar)")
    input_args(t)
    t.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
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
    t.add_argument("--backend", default="auto", choices=list(train_backend_names()))
    t.add_argument("--id-order", default="hf", choices=["hf", "bytes"],
                   help="hf: HF's ids and merges (default); bytes: byte b = id b, merges from "
                        "256 (minbpe / tiktoken / nanochat; ties by byte value, as rustbpe)")
    t.add_argument("--specials-at", choices=["start", "end"],
                   help="special tokens' ids before the bytes or after the merges (default: "
                        "start for hf, end for bytes)")
    t.add_argument("--threads", type=int, help="cores for training (default: all)")
    t.add_argument("--max-word-memory", metavar="BYTES",
                   help="unique words kept before rare ones are pruned (e.g. 8G; default a "
                        "quarter of the memory; pruning is warned about)")
    t.add_argument("--verbose", "-v", action="store_true",
                   help="one line per merge on stderr (the pair, its id, its count)")
    t.add_argument("--name", help="the encoding's name (default: the output file's stem)")
    t.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    t.add_argument("--model-type", default="bpe", choices=["bpe", "spm"],
                   help="bpe: byte-level BPE (default); spm: SentencePiece BPE with spm_train "
                        "--model_type=bpe's pieces and ids, written as a .model (the options "
                        "below; sentences are lines)")
    t.add_argument("--character-coverage", type=float, default=0.9995, help="(spm)")
    t.add_argument("--byte-fallback", action="store_true", help="(spm)")
    t.add_argument("--user-defined", action="append", metavar="PIECE", help="(spm, repeat)")
    t.add_argument("--control", action="append", metavar="PIECE", help="(spm, repeat)")
    t.add_argument("--normalization-rule-name", default="nmt_nfkc",
                   choices=["nmt_nfkc", "identity"], help="(spm)")
    t.add_argument("--max-sentencepiece-length", type=int, default=16, help="(spm)")
    t.add_argument("--split-digits", action="store_true", help="(spm)")
    t.set_defaults(func=cmd_train)


def cmd_train(args) -> int:
    from . import train as train_mod
    from .corpus import resolve_inputs
    from .export import save_hf_json, save_tiktoken

    out = Path(args.output)
    if args.model_type == "spm":
        return _train_spm(args, out)
    if out.suffix not in (".json", ".tiktoken"):
        raise ValueError(f"-o {out}: the output must end with .json (HF tokenizer.json) or "
                         ".tiktoken (ranks + a .tiktoken.json sidecar with pattern and specials)")
    if not out.parent.is_dir():
        raise ValueError(f"-o {out}: no such directory {out.parent}")
    if out.exists() and not args.overwrite:
        raise ValueError(f"-o {out} exists; pass --overwrite to replace it")
    if not os.access(out.parent, os.W_OK):
        raise ValueError(f"-o {out}: the directory {out.parent} is not writable")
    specials = args.special or []
    smallest = 256 + len(set(specials))
    if args.vocab_size < smallest:
        raise ValueError(f"--vocab-size {args.vocab_size} is below the {smallest} ids every "
                         f"byte-level vocabulary has (256 bytes + {len(set(specials))} special "
                         f"token(s)); pass --vocab-size {smallest} or more")
    sources = resolve_inputs(args.inputs, field=args.field, include=args.include,
                             exclude=args.exclude,
                             note=lambda line: print(f"gputok: {line}", file=sys.stderr))
    if any(s.path == "-" for s in sources):
        raise ValueError("gputok train reads files (.txt, .jsonl, .parquet, .arrow; .gz/.zst), "
                         "not standard input")
    inputs = sources  # (path-like: train_bpe reads them as files, checked once, here)
    t0 = time.perf_counter()
    try:
        enc = train_mod.train_bpe(inputs, vocab_size=args.vocab_size, pattern=args.pattern,
                                  special_tokens=specials, min_frequency=args.min_frequency,
                                  backend=args.backend, name=args.name or out.name.split(".")[0],
                                  progress=not args.quiet and sys.stderr.isatty(),
                                  field=args.field, errors=args.errors, id_order=args.id_order,
                                  specials_at=args.specials_at, verbose=args.verbose,
                                  threads=args.threads,
                                  max_word_memory=_parse_bytes(args.max_word_memory))
        st = train_mod.last_stats
        if st.n_words == 0:
            held = ", ".join(s.path for s in inputs[:3])
            raise ValueError(f"the inputs hold no text ({held}); {out} was not written")
        _save_atomically(save_tiktoken if out.suffix == ".tiktoken" else save_hf_json, enc, out)
    except KeyboardInterrupt:
        print(f"gputok: interrupted; {out} was not written", file=sys.stderr)
        return 130
    dt = time.perf_counter() - t0
    n_bytes = sum(s.size for s in inputs)
    rate = st.n_merges / st.merges_s if st.merges_s > 0 else 0.0
    print(f"gputok train: {st.vocab_size} tokens ({st.n_merges} merges) from "
          f"{n_bytes / 1e6:.2f} MB, {st.n_words} unique words, in {dt:.2f} s (words "
          f"{st.words_s:.2f} s, merges {st.merges_s:.2f} s = {rate:.0f} merges/s, {st.backend})"
          f" -> {out}")
    if st.vocab_size < args.vocab_size:
        print(f"gputok: warning: stopped at {st.vocab_size} of the {args.vocab_size} tokens asked "
              f"for: no pair occurs --min-frequency {args.min_frequency} times or more",
              file=sys.stderr)
    return 0


def _train_spm(args, out: Path) -> int:
    """``gputok train --model-type spm``: SentencePiece BPE, written as a .model."""
    from . import train as train_mod
    from .corpus import resolve_inputs

    if out.suffix != ".model":
        raise ValueError(f"-o {out}: a SentencePiece model is written as a .model file")
    if out.exists() and not args.overwrite:
        raise ValueError(f"-o {out} exists; pass --overwrite to replace it")
    if not out.parent.is_dir():
        raise ValueError(f"-o {out}: no such directory {out.parent}")
    sources = resolve_inputs(args.inputs, field=args.field)
    if any(s.path == "-" for s in sources):
        raise ValueError("gputok train reads files, not standard input")
    t0 = time.perf_counter()
    try:
        m = train_mod.train_spm_bpe(
            [Path(s.path) for s in sources], vocab_size=args.vocab_size, field=args.field,
            errors=args.errors, threads=args.threads,
            character_coverage=args.character_coverage, byte_fallback=args.byte_fallback,
            user_defined_symbols=args.user_defined or [], control_symbols=args.control or [],
            normalization_rule_name=args.normalization_rule_name,
            max_sentencepiece_length=args.max_sentencepiece_length,
            split_digits=args.split_digits)
        m.save(out)
    except KeyboardInterrupt:
        print(f"gputok: interrupted; {out} was not written", file=sys.stderr)
        return 130
    print(f"gputok train: {len(m.pieces)} pieces ({m.n_merges} merges) from {m.n_words} unique "
          f"words in {time.perf_counter() - t0:.2f} s (SentencePiece BPE) -> {out}")
    return 0


def _parse_bytes(text: "str | None") -> "int | None":
    """``4G``, ``512M``, ``100000`` -> bytes (None stays None)."""
    if text is None:
        return None
    t = text.strip().upper().rstrip("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        n = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise ValueError(f"--max-word-memory {text!r}: expected bytes such as 4G, 512M or "
                         "1000000") from None
    if n < 1:
        raise ValueError(f"--max-word-memory {text!r} must be positive")
    return int(n)


def _save_atomically(save, enc, out: Path) -> None:
    """``save(enc, path)`` into temporary names, then renamed into place: an interrupted or
    failed write leaves no half-written file (the .tiktoken sidecar goes first, the ranks
    last: a reader that finds the ranks finds the sidecar)."""
    from .loaders.tiktoken_file import sidecar_path

    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    made = [tmp, sidecar_path(tmp)]
    try:
        save(enc, tmp)
        if sidecar_path(tmp).exists():
            os.replace(sidecar_path(tmp), sidecar_path(out))
        os.replace(tmp, out)
    finally:
        for p in made:
            if p.exists():
                p.unlink()
