"""Output formats, each read back by the format's own library (or checked against its writer)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import gputok
from gputok.corpus.formats import FORMATS, get_format
from gputok.corpus.formats.arrow import batch_encoder, from_arrow, to_arrow
from gputok.corpus import encode_corpus, read_manifest, read_shards

TEXTS = ["hello world", "", "second doc\nwith lines", "日本語 and emoji 😀", "x" * 300] * 7


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import json

    d = tmp_path_factory.mktemp("fmt")
    p = d / "c.jsonl"
    p.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    return p


def _encode(corpus, out, fmt, encoding="r50k_base", **kw):
    encode_corpus([corpus], out, encoding=encoding, fmt=fmt, shard_tokens=150, batch_bytes=200,
                  workers=1, **kw)
    return read_manifest(out)


def _docs(out):
    docs = []
    for ids, off in read_shards(out):
        docs += [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]
    return docs


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_round_trips_through_its_reader(corpus, tmp_path, fmt):
    enc = gputok.get_encoding("r50k_base")
    m = _encode(corpus, tmp_path / fmt, fmt, append_eot=True)
    assert m["complete"] and len(m["shards"]) > 3 and m["output_format"] == fmt
    assert all(s["tokens"] <= 150 for s in m["shards"] if s["docs"] > 1)  # a cap, not a minimum
    want = [enc.encode(t) + [enc.eot_token] for t in TEXTS]
    assert _docs(tmp_path / fmt) == want


def test_npy_read_with_numpy(corpus, tmp_path):
    m = _encode(corpus, tmp_path, "npy")
    enc = gputok.get_encoding("r50k_base")
    s = m["shards"][0]
    ids, off = (np.load(tmp_path / n) for n in s["files"])
    assert ids.dtype == np.uint16 and off.dtype == np.int64
    assert [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)] == \
        [enc.encode(t) for t in TEXTS[:s["docs"]]]


def test_nanogpt_is_nanogpts_memmap(corpus, tmp_path):
    m = _encode(corpus, tmp_path, "nanogpt")  # EOT appended without being asked: the format's rule
    enc = gputok.get_encoding("r50k_base")
    stream = np.concatenate([np.memmap(tmp_path / s["files"][0], dtype=np.uint16, mode="r")
                             for s in m["shards"]])
    want = [i for t in TEXTS for i in enc.encode(t) + [enc.eot_token]]
    assert stream.tolist() == want and m["append_eot"] and m["eot"] == 50256


def test_nanogpt_refuses_big_vocab_before_work(corpus, tmp_path):
    with pytest.raises(ValueError, match="uint16 ids, but the vocabulary has 200019"):
        _encode(corpus, tmp_path / "o", "nanogpt", encoding="o200k_base")
    assert not (tmp_path / "o").exists()


def _megatron_expected(ids_per_doc, code, itemsize):
    lens = [len(d) for d in ids_per_doc]
    ptrs = np.concatenate([[0], np.cumsum(lens)[:-1]]) * itemsize if lens else []
    return (b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, code) + struct.pack("<QQ", len(lens), len(lens) + 1)
            + struct.pack(f"<{len(lens)}i", *lens) + struct.pack(f"<{len(lens)}q", *map(int, ptrs))
            + struct.pack(f"<{len(lens) + 1}q", *range(len(lens) + 1)))


@pytest.mark.parametrize("encoding,code,dt", [("r50k_base", 8, "<u2"), ("cl100k_base", 4, "<i4")])
def test_megatron_idx_matches_the_published_layout(corpus, tmp_path, encoding, code, dt):
    m = _encode(corpus, tmp_path, "megatron", encoding=encoding)
    enc = gputok.get_encoding(encoding)
    first = m["shards"][0]
    docs = [enc.encode(t) for t in TEXTS[:first["docs"]]]
    idx = (tmp_path / first["files"][1]).read_bytes()
    assert idx == _megatron_expected(docs, code, np.dtype(dt).itemsize)
    assert (tmp_path / first["files"][0]).read_bytes() == \
        np.array([i for d in docs for i in d], dtype=dt).tobytes()


@pytest.mark.parametrize("encoding", ["r50k_base", "cl100k_base"])
def test_megatron_byte_identical_to_datatrove_megatron_writer(corpus, tmp_path, encoding):
    mt = pytest.importorskip("datatrove.pipeline.tokens.megatron_tokenizer",
                             reason="datatrove not installed: pip install 'gputok[test]'")
    m = _encode(corpus, tmp_path / "g", "megatron", encoding=encoding)
    enc = gputok.get_encoding(encoding)
    first = m["shards"][0]
    w = mt.MegatronTokenizedFile(str(tmp_path / "d"), "ref",
                                 token_size=2 if enc.n_vocab < 65500 else 4)
    for t in TEXTS[:first["docs"]]:
        w.write(enc.encode(t))
    w.close()
    for ours, ref in zip(first["files"], ("ref.bin", "ref.idx")):
        assert (tmp_path / "g" / ours).read_bytes() == (tmp_path / "d" / ref).read_bytes()


@pytest.mark.full  # megatron-core needs torch: .ci/run installs both where a CPU wheel exists
def test_megatron_core_indexed_dataset_reads_it(corpus, tmp_path):
    idx_mod = pytest.importorskip(
        "megatron.core.datasets.indexed_dataset",
        reason="megatron-core + CPU torch not installed (optional: pip install torch==2.13.0 "
               "megatron-core==0.16.1)")
    m = _encode(corpus, tmp_path, "megatron", encoding="cl100k_base")
    enc = gputok.get_encoding("cl100k_base")
    docs, k = [], 0
    for s in m["shards"]:
        ds = idx_mod.IndexedDataset(str(tmp_path / s["files"][0][:-4]))
        assert len(ds) == s["docs"] and list(ds.document_indices) == list(range(s["docs"] + 1))
        docs += [ds[i].tolist() for i in range(len(ds))]
        k += 1
    assert docs == [enc.encode(t) for t in TEXTS]


@pytest.mark.full  # megatron-core, as above
@pytest.mark.parametrize("encoding", ["r50k_base", "cl100k_base"])
def test_megatron_byte_identical_to_megatron_core_builder(corpus, tmp_path, encoding):
    idx_mod = pytest.importorskip(
        "megatron.core.datasets.indexed_dataset",
        reason="megatron-core + CPU torch not installed (optional: pip install torch==2.13.0 "
               "megatron-core==0.16.1)")
    import torch

    m = _encode(corpus, tmp_path / "g", "megatron", encoding=encoding)
    enc = gputok.get_encoding(encoding)
    docs = iter(TEXTS)
    dtype = idx_mod.DType.optimal_dtype(enc.n_vocab)  # Megatron's own choice of dtype
    for k, s in enumerate(m["shards"]):
        b = idx_mod.IndexedDatasetBuilder(str(tmp_path / f"ref{k}.bin"), dtype=dtype)
        for _ in range(s["docs"]):
            ids = enc.encode(next(docs))
            b.add_document(torch.tensor(ids, dtype=torch.int64), [len(ids)])
        b.finalize(str(tmp_path / f"ref{k}.idx"))
        for ours, ref in zip(s["files"], (f"ref{k}.bin", f"ref{k}.idx")):
            assert (tmp_path / "g" / ours).read_bytes() == (tmp_path / ref).read_bytes()


@pytest.mark.parametrize("encoding", ["r50k_base", "o200k_base"])
def test_datatrove_byte_identical_to_datatroves_writer(corpus, tmp_path, encoding):
    tk = pytest.importorskip("datatrove.pipeline.tokens.tokenizer",
                             reason="datatrove not installed: pip install 'gputok[test]'")
    m = _encode(corpus, tmp_path / "g", "datatrove", encoding=encoding, append_eot=True)
    enc = gputok.get_encoding(encoding)
    size = 2 if enc.n_vocab <= 65536 else 4
    docs = iter(TEXTS)
    for k, s in enumerate(m["shards"]):
        w = tk.TokenizedFile(str(tmp_path / "d"), f"ref{k}.ds", token_size=size)
        for _ in range(s["docs"]):
            w.write(enc.encode(next(docs)) + [enc.eot_token], None)
        w.close()
        for ours, ref in zip(s["files"], (f"ref{k}.ds", f"ref{k}.ds.index")):
            assert (tmp_path / "g" / ours).read_bytes() == (tmp_path / "d" / ref).read_bytes()


def test_parquet_and_arrow_read_by_pyarrow(corpus, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    enc = gputok.get_encoding("cl100k_base")
    want = [enc.encode(t) for t in TEXTS]
    for fmt in ("parquet", "arrow"):
        m = _encode(corpus, tmp_path / fmt, fmt, encoding="cl100k_base")
        got = []
        for s in m["shards"]:
            p = str(tmp_path / fmt / s["files"][0])
            t = pq.read_table(p) if fmt == "parquet" else pa.ipc.open_stream(p).read_all()
            assert t.schema.field("input_ids").type == pa.large_list(pa.int32())
            got += t.column("input_ids").to_pylist()
        assert got == want


@pytest.mark.full  # HF datasets: the test-full extra
def test_parquet_and_arrow_read_by_datasets(corpus, tmp_path):
    datasets = pytest.importorskip("datasets", reason="datasets not installed")
    enc = gputok.get_encoding("cl100k_base")
    want = [enc.encode(t) for t in TEXTS]
    for fmt in ("parquet", "arrow"):
        _encode(corpus, tmp_path / fmt, fmt, encoding="cl100k_base")
    files = [str(tmp_path / "parquet" / s["files"][0]) for s in read_manifest(tmp_path / "parquet")["shards"]]
    ds = datasets.Dataset.from_parquet(files)
    assert ds["input_ids"] == want
    first = read_manifest(tmp_path / "arrow")["shards"][0]
    ds = datasets.Dataset.from_file(str(tmp_path / "arrow" / first["files"][0]))
    assert ds["input_ids"] == want[:first["docs"]]


def test_to_arrow_wraps_uint32_ids_without_copying():
    ids = np.array([5, 6, 7, 70000], dtype=np.uint32)
    off = np.array([0, 2, 2, 4], dtype=np.int64)
    arr = to_arrow(ids, off)
    assert arr.to_pylist() == [[5, 6], [], [7, 70000]]
    assert arr.values.buffers()[1].address == ids.ctypes.data  # the ids' own memory
    assert arr.buffers()[1].address == off.ctypes.data
    back_ids, back_off = from_arrow(arr.slice(1))
    assert back_ids.tolist() == [7, 70000] and back_off.tolist() == [0, 0, 2]


@pytest.mark.full  # HF datasets: the test-full extra
def test_hf_datasets_map_batched_returns_arrow():
    datasets = pytest.importorskip("datasets", reason="datasets not installed")
    import pyarrow as pa

    enc = gputok.get_encoding("cl100k_base")
    ds = datasets.Dataset.from_dict({"text": TEXTS, "n": list(range(len(TEXTS)))})
    fn = batch_encoder(enc)
    out = ds.with_format("arrow").map(fn, batched=True, batch_size=8)
    assert out["input_ids"].to_pylist() == [enc.encode(t) for t in TEXTS]
    assert out.features["input_ids"] == datasets.LargeList(datasets.Value("int32"))
    plain = ds.map(fn, batched=True, batch_size=8)  # dict-of-lists batches work too
    assert plain["input_ids"] == [enc.encode(t) for t in TEXTS]
    assert isinstance(fn({"text": ["a"]}), pa.Table)


def test_unknown_format_lists_them():
    with pytest.raises(ValueError, match="npy, nanogpt, megatron, datatrove, parquet, arrow"):
        get_format("tfrecord")


@pytest.mark.parametrize("fmt", ["npy", "nanogpt", "megatron", "datatrove"])
def test_shard_bytes_is_an_exact_cap(corpus, tmp_path, fmt):
    encode_corpus([corpus], tmp_path, encoding="r50k_base", fmt=fmt, shard_tokens=None,
                  shard_bytes=300, batch_bytes=300, workers=1)
    m = read_manifest(tmp_path)
    form = get_format(fmt)
    assert len(m["shards"]) > 3
    for s in m["shards"]:
        size = sum((tmp_path / n).stat().st_size for n in s["files"])
        assert size == sum(s["bytes"]) == form.nbytes(s["tokens"], s["docs"], 2)
        assert size <= 300 or s["docs"] == 1  # only a lone document may exceed the cap
    enc = gputok.get_encoding("r50k_base")
    eot = [enc.eot_token] if form.requires_eot else []
    assert _docs(tmp_path) == [enc.encode(t) + eot for t in TEXTS]


def test_npy_shards_are_byte_for_byte_what_numpy_save_writes():
    import io

    from gputok.corpus.formats.npy import _write_npy

    for a in [np.arange(300_000, dtype=np.uint32), np.arange(7, dtype=np.uint16),
              np.zeros(0, np.int64), np.arange(5, dtype=np.int64)[::2]]:
        want, got = io.BytesIO(), io.BytesIO()
        np.save(want, a)
        _write_npy(got, a)
        assert got.getvalue() == want.getvalue(), a.dtype


def test_npy_shard_from_parts_is_what_numpy_save_writes():
    """``Npy.write_parts`` (the shard writer's path: the batches' ids without a shard-sized
    copy) writes the bytes ``numpy.save`` writes for the concatenation, casting parts whose
    dtype differs, empty parts and none at all included."""
    import io

    from gputok.corpus.formats.npy import FORMAT

    cases = [([np.arange(300_000, dtype=np.uint32), np.arange(5, dtype=np.uint32)], np.uint32),
             ([np.arange(10, dtype=np.uint32), np.zeros(0, np.uint32),
               np.arange(70_000, dtype=np.uint32)[::3]], np.uint16),
             ([np.arange(9, dtype=np.uint16)], np.uint32), ([], np.uint16)]
    for parts, dt in cases:
        whole = (np.concatenate(parts) if parts else np.zeros(0)).astype(dt)
        offsets = np.array([0, len(whole)], np.int64)
        want_ids, want_off, got_ids, got_off = (io.BytesIO() for _ in range(4))
        np.save(want_ids, whole)
        np.save(want_off, offsets)
        FORMAT.write_parts([got_ids, got_off], parts, len(whole), dt, offsets)
        assert got_ids.getvalue() == want_ids.getvalue(), dt
        assert got_off.getvalue() == want_off.getvalue()
