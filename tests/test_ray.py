"""gputok.ray: a Ray Data actor pool gives the ids of a single process (optional extra)."""

from __future__ import annotations

import pytest

import gputok

ray = pytest.importorskip("ray", reason="Ray not installed: pip install 'gputok[ray]'")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)
    yield
    ray.shutdown()


def test_actor_pool_equals_single_process(ray_cluster):
    import pyarrow as pa

    import gputok.ray as gray

    texts = [f"doc {i}: " + "mixed 日本 text, 😀 " * (i % 11) for i in range(1500)]
    table = pa.table({"text": texts, "id": list(range(1500))})
    # six blocks from the start: a repartition step would need a CPU that the actors hold
    ds = ray.data.from_arrow([table.slice(k, 250) for k in range(0, 1500, 250)])
    rows = gray.tokenize(ds, "cl100k_base", actors=2, batch_size=128, append_eot=True,
                         backend="numpy").take_all()
    enc = gputok.get_encoding("cl100k_base")
    ids, offsets = enc.encode_batch_arrays(texts)
    want = [ids[offsets[i]:offsets[i + 1]].tolist() + [enc.eot_token] for i in range(1500)]
    assert [r["id"] for r in rows] == list(range(1500))  # input order (preserve_order)
    assert [list(r["input_ids"]) for r in rows] == want
    # without preserve_order Ray may reorder blocks; the ids of each row are the same
    ds2 = ray.data.from_arrow([table.slice(k, 250) for k in range(0, 1500, 250)])
    rows = gray.tokenize(ds2, "cl100k_base", actors=2, batch_size=128, preserve_order=False,
                         backend="numpy").take_all()
    assert sorted((r["id"], list(r["input_ids"])) for r in rows) == \
        [(i, w[:-1]) for i, w in enumerate(want)]


def test_tokenizer_actor_schema():
    import pyarrow as pa

    from gputok.ray import Tokenizer

    t = Tokenizer("r50k_base", keep_text=False)
    out = t(pa.table({"text": ["hello world", ""], "n": [1, 2]}))
    assert out.schema.names == ["n", "input_ids"]
    assert out.schema.field("input_ids").type == pa.large_list(pa.int32())
    assert out.column("input_ids").to_pylist() == [[31373, 995], []]
