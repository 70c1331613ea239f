"""The ``.tiktoken`` format: one ``<base64 token> <rank>`` per line (optionally gzipped)."""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
from pathlib import Path


def read_ranks(path: "str | Path", data: "bytes | None" = None) -> dict[bytes, int]:
    """Parse a .tiktoken file. Malformed lines raise ``ValueError`` naming file and line."""
    path = Path(path)
    if data is None:
        data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise ValueError(f"{path}: damaged gzip data ({e})") from None
    ranks: dict[bytes, int] = {}
    rank_line: dict[int, int] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}:{lineno}: expected '<base64 token> <rank>', got {line[:60]!r}")
        try:
            tok = base64.b64decode(parts[0], validate=True)
            rank = int(parts[1])
        except (binascii.Error, ValueError):
            raise ValueError(f"{path}:{lineno}: bad base64 token or rank: {line[:60]!r}") from None
        if tok in ranks:
            raise ValueError(f"{path}:{lineno}: token {tok!r} appears twice")
        if rank < 0 or rank >= 1 << 32:
            raise ValueError(f"{path}:{lineno}: rank {rank} is out of range")
        if rank in rank_line:
            raise ValueError(f"{path}:{lineno}: rank {rank} was already given to the token on "
                             f"line {rank_line[rank]}")
        rank_line[rank] = lineno
        ranks[tok] = rank
    if not ranks:
        raise ValueError(f"{path}: no tokens found (is this a .tiktoken file?)")
    return ranks


def read_ranks_digest(path: "str | Path") -> tuple[dict[bytes, int], str]:
    """``read_ranks`` and a digest of the file's bytes (names cached merge tables)."""
    data = Path(path).read_bytes()
    return read_ranks(path, data), hashlib.sha256(data).hexdigest()[:32]


def write_ranks(path: "str | Path", ranks: dict[bytes, int]) -> None:
    """Write ranks in the .tiktoken format, sorted by rank."""
    lines = [base64.b64encode(t) + b" " + str(r).encode() for t, r in sorted(ranks.items(),
                                                                             key=lambda kv: kv[1])]
    Path(path).write_bytes(b"\n".join(lines) + b"\n")


def sidecar_path(path: "str | Path") -> Path:
    """``x.tiktoken`` -> ``x.tiktoken.json``: gputok's record of the pattern and specials."""
    return Path(str(path) + ".json")


def read_sidecar(path: "str | Path") -> "dict | None":
    side = sidecar_path(path)
    if not side.exists():
        return None
    try:
        meta = json.loads(side.read_text("utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{side}: invalid JSON ({e})") from None
    if not isinstance(meta, dict) or "pat_str" not in meta:
        raise ValueError(f"{side}: expected an object with 'pat_str' (and 'special_tokens')")
    return meta
