"""The ``gputok`` command: encode corpora into training shards, train, compare, inspect.

    gputok encode --encoding cl100k_base corpus/*.jsonl -o out/ --format megatron
    gputok train --vocab-size 32000 --pattern cl100k corpus/*.jsonl -o tokenizer.json
    gputok parity --a tiktoken:cl100k_base --b gputok:cl100k_base corpus/*.jsonl
    gputok show --encoding o200k_base "Hello world"
    gputok info
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from .corpus.formats import FORMATS


def _size(text: str) -> int:
    """``8M`` / ``64k`` / ``1G`` / ``123``: sizes and counts in arguments (powers of 1024)."""
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().rstrip("b")
    try:
        n = int(float(t[:-1]) * mult[t[-1]]) if t and t[-1] in mult else int(t)
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"expected a size like 8M, 64k or 1000, got {text!r}")
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size, got {text!r}")
    return n


def _workers(text: str):
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected 'auto' or a number of processes >= 1, got {text!r}")


def _encoding_spec(args):
    """What ``--encoding`` / ``--tokenizer`` / ``--pattern`` name: a name, a path, or (a
    ``.tiktoken`` file with ``--pattern``) a loaded ``Encoding``."""
    import gputok

    if args.encoding and args.tokenizer:
        raise ValueError("give --encoding NAME or --tokenizer FILE, not both")
    if args.pattern is not None:
        if not args.tokenizer:
            raise ValueError("--pattern goes with --tokenizer FILE.tiktoken (a named encoding "
                             "has its own pattern)")
        return gputok.load(args.tokenizer, pat_str=args.pattern)
    if args.tokenizer:
        _needs_pattern(args.tokenizer)
        return args.tokenizer
    return args.encoding or "cl100k_base"


def _needs_pattern(path) -> None:
    """A ``.tiktoken`` file holds ranks only: without its ``.json`` sidecar the command line
    must name the pattern (the loader's own message names the Python argument)."""
    from . import patterns
    from .loaders import sniff
    from .loaders.tiktoken_file import read_sidecar, sidecar_path

    try:
        with open(path, "rb") as f:
            head = f.read(256)
        kind = sniff(Path(path), head)
    except (OSError, ValueError):
        return  # the loader says what is wrong with the file
    if kind == "tiktoken" and read_sidecar(path) is None:
        raise ValueError(f"{path}: a .tiktoken file holds no pre-tokenizer pattern; pass "
                         f"--pattern NAME ({', '.join(patterns.NAMED)}) or --pattern REGEX, or "
                         f"put a {sidecar_path(path).name} sidecar with 'pat_str' next to it")


def _encoding(args):
    import gputok

    spec = _encoding_spec(args)
    if isinstance(spec, gputok.Encoding):
        return spec
    return gputok.load(spec) if args.tokenizer else gputok.get_encoding(spec)


def _allowed(args):
    vals = args.allowed_special or []
    return "all" if "all" in vals else frozenset(vals)


def _bar(args, total, desc):
    """A tqdm bar on stderr when it is a terminal (never in logs and pipes), else None."""
    if args.quiet or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total or None, unit="B", unit_scale=True, unit_divisor=1024, desc=desc,
                file=sys.stderr, dynamic_ncols=True)


def cmd_encode(args) -> int:
    from .corpus import encode_corpus

    bar = None
    allowed = _allowed(args)

    def start(total):  # drawn once the job starts: nothing frozen at 0 during its set-up
        nonlocal bar
        bar = _bar(args, total, "encode")

    def progress(nbytes, docs, tokens):
        if bar is not None:
            bar.update(nbytes)
            bar.set_postfix(docs=docs, tokens=tokens, refresh=False)

    encoding = _encoding_spec(args)  # (the command line's own checks first, then the files)
    try:
        s = encode_corpus(args.inputs, args.output, encoding=encoding,
                          fmt=args.format, field=args.field, input_format=args.input_format,
                          errors=args.errors, allowed_special=allowed,
                          special_as_text=args.special_as_text, append_eot=args.append_eot,
                          add_special_tokens=args.add_special_tokens,
                          batch_bytes=args.batch_bytes, shard_tokens=args.shard_tokens,
                          shard_bytes=args.shard_bytes, resume=args.resume,
                          checksum=args.checksum, overwrite=args.overwrite,
                          backend=args.backend, devices=args.devices,
                          workers=args.workers, include=args.include, exclude=args.exclude,
                          on_start=start, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    if s.seconds == 0 and s.docs == 0 and s.resumed_docs:
        print(f"gputok encode: {args.output} is already complete ({s.resumed_docs} docs, "
              f"{s.shards} shard(s)); nothing to do")
        return 0
    resumed = f" (resumed after {s.resumed_docs} docs)" if s.resumed_docs else ""
    workers = f" x{s.workers}" if s.workers > 1 else ""
    built = (f", after {s.build_seconds:.1f} s building the CPU kernels (once)"
             if s.build_seconds >= 0.05 else "")
    print(f"gputok encode: {s.docs} docs, {s.bytes / 1e6:.2f} MB, {s.tokens} tokens "
          f"({args.tokenizer or args.encoding or 'cl100k_base'}, {s.backends[0]}{workers}) in "
          f"{s.seconds:.2f} s = {s.bytes / 1e6 / max(s.seconds, 1e-9):.2f} MB/s{built}{resumed}; "
          f"{s.shards} {args.format} shard(s) in {args.output}")
    return 0


_COLOURS = ("\x1b[48;5;153m", "\x1b[48;5;223m", "\x1b[48;5;194m", "\x1b[48;5;225m")
_RESET = "\x1b[0m"


def colour_tokens(pieces: "list[bytes]") -> str:
    """The text with each token on a background colour (four alternating), for a terminal.
    A token that ends inside a UTF-8 character is shown merged with the next.

    >>> colour_tokens([b"hello", b" world"]) == ("\\x1b[48;5;153mhello\\x1b[0m"
    ...                                         "\\x1b[48;5;223m world\\x1b[0m")
    True
    """
    out, pending, k = [], b"", 0
    for p in pieces:
        pending += p
        try:
            text = pending.decode("utf-8")
        except UnicodeDecodeError:
            continue
        text = text.replace("\n", "\\n\n").replace("\t", "\\t")
        out.append(f"{_COLOURS[k % len(_COLOURS)]}{text}{_RESET}")
        pending, k = b"", k + 1
    if pending:
        out.append(f"{_COLOURS[k % len(_COLOURS)]}{pending.decode('utf-8', 'replace')}{_RESET}")
    return "".join(out)


def cmd_show(args) -> int:
    enc = _encoding(args)
    text = " ".join(args.text) if args.text and args.text != ["-"] else sys.stdin.read()
    from .specials import DisallowedSpecialError, shell_quote as _shell_quote

    try:
        ids = enc.encode(text, allowed_special=_allowed(args),
                         disallowed_special=() if args.special_as_text else "all")
    except DisallowedSpecialError as e:
        raise ValueError(f"the text contains the special token {e.token!r}; pass "
                         f"--allowed-special {_shell_quote(e.token)} to show it as the control "
                         "token, or --special-as-text to show it as plain text") from None
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty()
                                        and os.environ.get("NO_COLOR") is None)
    print(f"{len(ids)} tokens ({enc.name})")
    if colour:
        print(colour_tokens([enc.decode_single_token_bytes(i) for i in ids]))
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
    from . import unicode as uni

    print("unicode data (pinned; the installed regex/python does not matter): regex classes "
          + ", ".join(f"{fam} {uni.unicode_version(fam)}" for fam in uni.FAMILIES)
          + f"; hf normalizers {uni.unicode_version('hf', table='normalize')}, hf lowercase "
          f"{uni.unicode_version('hf', table='lowercase')}")
    print(f"encodings: {', '.join(gputok.list_encoding_names())}")
    print(f"output formats: {', '.join(FORMATS)}")
    return 0


def cmd_parity(args) -> int:
    from .parity import run_parity

    return run_parity(args)


def _input_args(sp):
    sp.add_argument("--include", action="append", default=[], metavar="GLOB",
                    help="in directory inputs, also read files matching GLOB (a name like "
                         "'*.md', or a path below the directory like 'extra/*.txt'); repeatable")
    sp.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                    help="in directory and glob inputs, skip files matching GLOB (e.g. "
                         "'test-*'); repeatable")


def _vocab_args(sp):
    sp.add_argument("--encoding", "-e", help="named encoding (default cl100k_base)")
    sp.add_argument("--tokenizer", help="a tokenizer.json, .model, .gguf or .tiktoken file "
                    "instead")
    sp.add_argument("--pattern", help="the pre-tokenizer of a --tokenizer .tiktoken file that "
                    "has no .tiktoken.json sidecar: cl100k, o200k, gpt2, ... or a regex")
    sp.add_argument("--allowed-special", action="append", metavar="TOKEN",
                    help="a special token to encode as its control id (repeat for more; 'all' "
                         "for every one)")


def build_parser() -> argparse.ArgumentParser:
    import gputok

    p = argparse.ArgumentParser(prog="gputok", description="gputok: encode corpora into training "
                                "shards, train vocabularies, compare tokenizers, inspect tokens")
    p.add_argument("--version", action="version", version=f"gputok {gputok.__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    e = sub.add_parser("encode", help="encode corpora into training shards")
    _vocab_args(e)
    e.add_argument("inputs", nargs="+", metavar="INPUT",
                   help=".txt (one doc per file), .jsonl (one doc per line), .parquet/.arrow "
                        "(--field column), .gz/.zst, directories (their data files: README, "
                        "licences and metadata are skipped), globs, or - for stdin (jsonl)")
    e.add_argument("-o", "--output", required=True, help="output directory")
    _input_args(e)
    e.add_argument("--format", "-f", default="npy", choices=FORMATS,
                   help="output format (default npy)")
    e.add_argument("--field", default="text", help="JSON field / column holding the text")
    e.add_argument("--input-format", default="auto", choices=["auto", "txt", "jsonl", "parquet",
                                                             "arrow"],
                   help="read every input as this kind (default: by file name; stdin: jsonl)")
    e.add_argument("--backend", default="auto",
                   help="auto, numpy, native, cuda, cuda:<index> or metal (default auto)")
    e.add_argument("--devices", help="GPUs to use, one pipeline each: 'all' or indices like 0,1")
    e.add_argument("--workers", default="auto", type=_workers,
                   help="encoder processes (default auto: one per core for CPU backends)")
    e.add_argument("--errors", default="strict", choices=["strict", "replace"],
                   help="invalid UTF-8 in input: fail (default) or decode as U+FFFD")
    e.add_argument("--special-as-text", action="store_true",
                   help="encode special-token text found in documents as plain text "
                        "(default: such documents are an error)")
    e.add_argument("--add-special-tokens", action="store_true",
                   help="add what the tokenizer's library adds around each document (HF's "
                        "post-processor: [CLS] ... [SEP], <s>; sentencepiece's or llama.cpp's "
                        "BOS)")
    e.add_argument("--append-eot", action="store_true", help="end every document with <eot> "
                   "(always on for --format nanogpt)")
    e.add_argument("--batch-bytes", type=_size, default=8 << 20, help="text per batch (8M)")
    e.add_argument("--shard-tokens", type=_size, default=1 << 24,
                   help="at most this many tokens per shard (default 16M)")
    e.add_argument("--shard-bytes", type=_size, help="at most this many bytes per shard")
    e.add_argument("--checksum", choices=("auto", "xxh64", "sha256"), default="auto",
                   help="the shards' checksum in the manifest (auto: xxh64 where the native "
                   "library is built, else sha256; --resume verifies either)")
    e.add_argument("--resume", action="store_true", help="continue an interrupted job")
    e.add_argument("--overwrite", action="store_true", help="replace an existing output")
    e.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    e.set_defaults(func=cmd_encode)

    s = sub.add_parser("show", help="show how a text is tokenized")
    _vocab_args(s)
    s.add_argument("text", nargs="*", help="text (default, or -: stdin)")
    s.add_argument("--special-as-text", action="store_true",
                   help="encode special-token text as plain text (default: an error)")
    s.add_argument("--color", default="auto", choices=["auto", "always", "never"],
                   help="colour the tokens (auto: when stdout is a terminal)")
    s.set_defaults(func=cmd_show)

    from .cli_train import add_parser as add_train

    add_train(sub, _input_args)

    from .parity import add_parser as add_parity

    add_parity(sub)

    i = sub.add_parser("info", help="version, backends and why unavailable ones are")
    i.set_defaults(func=cmd_info)
    return p


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def _stdout_is_closed() -> bool:
    """Whether the reader of our standard output has gone away (a pipe whose read end is closed
    polls as an error on its write end)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no real descriptor (captured, closed)
        return False


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input, 130 interrupted)."""
    from .corpus import Interrupted

    args = build_parser().parse_args(argv)
    if argv is None:  # a real process: `kill` is handled like Ctrl-C (finished work is kept)
        signal.signal(signal.SIGTERM, _sigterm)
    try:
        return args.func(args)
    except BrokenPipeError as e:
        if _stdout_is_closed():  # `gputok show ... | head`: the reader has what it wanted
            _silence_stdout()
            return 0
        # any other pipe (a worker's, a FIFO given as input or output) is a real failure
        print(f"gputok: error: broken pipe: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"gputok: interrupted; {e}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("gputok: interrupted", file=sys.stderr)
        return 130
    except (ValueError, KeyError, FileNotFoundError, RuntimeError, OSError, ImportError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"gputok: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
