"""gputok.ray: a Ray Data actor pool gives the ids of a single process (optional extra; the full
tier, where ``.ci/run`` installs ``ray[data]``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gputok

pytestmark = pytest.mark.full
ray = pytest.importorskip("ray", reason="Ray not installed: pip install 'gputok[ray]'")
ROOT = Path(__file__).resolve().parent.parent


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


def test_default_actors_on_a_two_cpu_cluster_do_not_starve_the_reads(tmp_path):
    """``tokenize`` with its default two actors on ``ray.init(num_cpus=2)``, over a dataset
    whose blocks are read by tasks (a Parquet file, ``from_items``): the actors must leave a
    CPU for the reads (they once held both, and the job waited forever). In a child process,
    so that a hang is a failed test, not a stuck run."""
    code = textwrap.dedent(f"""
        import pyarrow as pa, pyarrow.parquet as pq, ray
        import gputok, gputok.ray as gray
        texts = [f"doc {{i}} hello world" for i in range(3000)]
        pq.write_table(pa.table({{"text": texts}}), {str(tmp_path / "c.parquet")!r},
                       row_group_size=500)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        enc = gputok.get_encoding("r50k_base")
        want = [enc.encode(t) for t in texts]
        for ds in (ray.data.read_parquet({str(tmp_path / "c.parquet")!r}),
                   ray.data.from_items([{{"text": t}} for t in texts])):
            rows = gray.tokenize(ds, "r50k_base", backend="numpy").take_all()
            assert [list(r["input_ids"]) for r in rows] == want
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_actor_cpus_leave_room_for_the_reads():
    from gputok.ray import actor_cpus

    assert actor_cpus(2, 2) == 0.5 and actor_cpus(1, 2) == 1.0 and actor_cpus(16, 64) == 1.0
    assert actor_cpus(8, 8) * 8 <= 7 and actor_cpus(3, 1) * 3 < 1
