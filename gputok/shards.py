"""Output shards: ids + document offsets as .npy files, with a manifest that makes jobs resumable.

Layout of an output directory::

    manifest.json                 what was encoded, with what, and every finished shard
    shard_00000.ids.npy           uint16 (vocab fits) or uint32 token ids, all documents
    shard_00000.offsets.npy       int64, len docs + 1: document i = ids[offsets[i]:offsets[i+1]]

Every file is written to a temporary name and renamed into place, and the manifest is rewritten
(atomically) after each shard, so a job killed at any moment leaves only whole shards that the
manifest lists; ``--resume`` continues after the last listed document.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

FORMAT = "gputok-shards-v1"


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ShardWriter:
    def __init__(self, outdir: "str | Path", *, meta: dict, dtype, shard_tokens: int,
                 resume: bool = False, overwrite: bool = False):
        self.outdir = Path(outdir)
        self.dtype = np.dtype(dtype)
        self.shard_tokens = shard_tokens
        self.manifest_path = self.outdir / "manifest.json"
        self.meta = dict(meta)
        self.shards: list[dict] = []
        self.outdir.mkdir(parents=True, exist_ok=True)
        if self.manifest_path.exists():
            old = json.loads(self.manifest_path.read_text())
            if resume:
                for key in ("encoding", "inputs", "field", "append_eot"):
                    if old.get(key) != self.meta.get(key):
                        raise ValueError(f"{self.manifest_path}: cannot resume, {key} differs "
                                         f"({old.get(key)!r} != {self.meta.get(key)!r})")
                self.shards = old["shards"]
            elif not overwrite:
                raise ValueError(f"{self.outdir} already holds a gputok output; pass --resume to "
                                 "continue it or --overwrite to replace it")
            else:
                for s in old.get("shards", []):
                    for key in ("ids", "offsets"):
                        (self.outdir / s[key]).unlink(missing_ok=True)
        self._ids: list[np.ndarray] = []
        self._lens: list[np.ndarray] = []
        self._pending = 0

    @property
    def docs_done(self) -> int:
        return sum(s["docs"] for s in self.shards)

    def add(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        self._ids.append(ids.astype(self.dtype, copy=False))
        self._lens.append(np.diff(offsets))
        self._pending += len(ids)
        if self._pending >= self.shard_tokens:
            self.flush()

    def flush(self) -> None:
        if not self._lens:
            return
        ids = np.concatenate(self._ids) if self._ids else np.zeros(0, self.dtype)
        lens = np.concatenate(self._lens)
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        k = len(self.shards)
        names = {"ids": f"shard_{k:05d}.ids.npy", "offsets": f"shard_{k:05d}.offsets.npy"}
        _atomic_write(self.outdir / names["ids"], lambda f: np.save(f, ids))
        _atomic_write(self.outdir / names["offsets"], lambda f: np.save(f, offsets))
        self.shards.append({**names, "docs": int(len(lens)), "tokens": int(len(ids)),
                            "first_doc": self.docs_done})
        self._ids, self._lens, self._pending = [], [], 0
        self._write_manifest(complete=False)

    def close(self) -> None:
        self.flush()
        self._write_manifest(complete=True)

    def _write_manifest(self, complete: bool) -> None:
        doc = {"format": FORMAT, **self.meta, "dtype": self.dtype.name, "complete": complete,
               "docs": self.docs_done, "tokens": sum(s["tokens"] for s in self.shards),
               "shards": self.shards}
        _atomic_write(self.manifest_path,
                      lambda f: f.write(json.dumps(doc, indent=1).encode("utf-8")))


def read_shards(outdir: "str | Path"):
    """Yield ``(ids, offsets)`` for every shard listed in ``outdir``'s manifest."""
    outdir = Path(outdir)
    manifest = json.loads((outdir / "manifest.json").read_text())
    for s in manifest["shards"]:
        yield np.load(outdir / s["ids"]), np.load(outdir / s["offsets"])
