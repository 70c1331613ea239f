#!/usr/bin/env bash
# The CUDA checks and benchmarks in one run on an NVIDIA machine, from the repository root:
#
#     GPUTOK_TEST_DATA=~/.cache/gputok-test-data OUT=/tmp/gpu bash bench/gpu_check.sh [steps]
#
# steps (default: smoke tests sanitize bench e2e host, about 8 minutes on an H200 host):
# smoke (one tiny encode per kernel family: stops the run when the device path is broken),
# tests (tests/test_cuda_gpu.py and the GPU training kernels), sanitize (compute-sanitizer
# memcheck, then racecheck, on a small batch with pieces for the block-wide merge:
# encode_merge_huge's shared memory and barriers), bench (bench/bench_cuda.py: 256 MB of str
# through encode_batch_arrays, bytes, dedup, the kernels stage by stage, against the native
# device on this host's cores and the fastest exact peers; its record: $OUT/cuda.md), e2e
# (bench/bench_e2e.py: `gputok encode` of a JSONL corpus on cuda and on the native device
# against the peers' scripts, gigatoken's encode_files included; $OUT/e2e-gpu.md), host
# (bench/bench_host.py: the host's share of a CUDA batch on a null device, GB/s per core, on
# this host; $OUT/host.md). Also: native (bench/bench_encode.py, native CPU device against
# tiktoken on all of this machine's cores), scaling (bench/bench_scaling.py: the native device
# at 1-16 threads). train (bench/bench_train.py: GPU training, backend="cuda", against the CPU
# trainer and HF on this host's cores in the same run, merges required identical;
# TRAIN_MB / TRAIN_VOCAB, default 256 MB -> 65,536; $OUT/train.md). kernels: the per-stage
# kernel times alone (bench_cuda.py --kernels-only), of each checkout of gputok in KERNEL_TREES (default this one) in turn, KERNEL_ROUNDS times
# (A B C A B C: an A/B on one GPU; this tree's bench scripts run against each tree's package).
# Every step has its own time limit (env SMOKE_S / TEST_S / SANITIZE_S / BENCH_S / E2E_S /
# HOST_S / NATIVE_S / SCALING_S / TRAIN_S / KERNELS_S) and writes its log under $OUT.
set -u
OUT="${OUT:-/tmp/gputok-gpu}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export GPUTOK_CORPUS_MB="${GPUTOK_CORPUS_MB:-4}" GPUTOK_FUZZ_EXAMPLES="${GPUTOK_FUZZ_EXAMPLES:-100}"
steps="${*:-smoke tests sanitize bench e2e host}"

{
  date -u +"%Y-%m-%d %H:%M:%S UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import sys, cupy, numpy; print(sys.version.split()[0], 'cupy', cupy.__version__, \
'cuda runtime', cupy.cuda.runtime.runtimeGetVersion(), 'numpy', numpy.__version__)"
  python3 -c "import importlib.metadata as m; print(*(f'{d} {m.version(d)}' for d in ('tiktoken', \
'tokenizers', 'gigatoken', 'toktok-rs', 'quicktok-v1')))" || echo "a peer is not installed"
  nproc
} 2>&1 | tee "$OUT/device.txt"

for step in $steps; do
  t0=$SECONDS
  case "$step" in
    smoke)
      timeout "${SMOKE_S:-150}" python3 - <<'EOF' 2>&1 | tee "$OUT/smoke.log"
import time, traceback
import gputok
from gputok.backends import cuda
t = time.perf_counter()
be = cuda.create()
print("backend", be.dev.name, f"{time.perf_counter() - t:.2f}s")
texts = ["hello world", "  def f(x):\n\treturn x**2  # 😀👍🏽", "中文 日本語 한국어 ٣²½",
         "a" * 5000, " " * 3000 + "x"]
bad = 0
for name in ("cl100k_base", "o200k_base", "r50k_base"):
    enc = gputok.get_encoding(name)
    t = time.perf_counter()
    try:
        ids, off = enc.encode_batch_arrays(texts, disallowed_special=(), backend=be)
        got = [ids[off[i]:off[i + 1]].tolist() for i in range(len(texts))]
        want = [enc.encode_ordinary(s) for s in texts]
        ok = got == want
        bad += not ok
        print(name, "ok" if ok else "MISMATCH", f"{time.perf_counter() - t:.2f}s",
              dict(be.fallbacks))
    except Exception:
        bad += 1
        traceback.print_exc()
raise SystemExit(1 if bad else 0)
EOF
      rc=${PIPESTATUS[0]}
      echo "smoke: rc=$rc ($((SECONDS - t0)) s)"
      [ "$rc" -eq 0 ] || exit "$rc"
      ;;
    tests)
      timeout "${TEST_S:-150}" python3 -m pytest tests/test_cuda_gpu.py tests/test_train_kernels.py \
        -m gpu -q -p no:cacheprovider -rfEs --durations=15 2>&1 | tee "$OUT/tests.log"
      echo "tests: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      ;;
    sanitize)
      for tool in memcheck racecheck; do
        timeout "${SANITIZE_S:-120}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
          --print-limit 20 python3 bench/sanitize_batch.py 2>&1 | tail -25
        echo "sanitize $tool: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      done 2>&1 | tee "$OUT/sanitize.log"
      ;;
    bench)
      timeout "${BENCH_S:-150}" python3 bench/bench_cuda.py --size-mb "${BENCH_MB:-256}" \
        --repeat "${REPEAT:-2}" --encodings ${BENCH_ENCODINGS:-cl100k_base o200k_base} \
        --record "$OUT/cuda.md" 2>&1 | tee "$OUT/bench.log"
      echo "bench: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      ;;
    e2e)
      timeout "${E2E_S:-100}" python3 bench/bench_e2e.py --backends cuda native \
        --size-mb "${E2E_MB:-256}" --repeat "${E2E_REPEAT:-1}" --kinds prose code multilingual \
        --record "$OUT/e2e-gpu.md" 2>&1 | tee "$OUT/e2e.log"
      echo "e2e: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      ;;
    host)
      timeout "${HOST_S:-60}" python3 bench/bench_host.py --size-mb "${HOST_MB:-128}" \
        --rounds 2 --record "$OUT/host.md" 2>&1 | tee "$OUT/host.log"
      echo "host: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      ;;
    native)
      timeout "${NATIVE_S:-150}" python3 bench/bench_encode.py --rounds "${ROUNDS:-1}" \
        --runners "gputok native batch" "gigatoken batch" "gigatoken tiktoken mode batch" \
        "toktok-rs batch" "quicktok-v1 batch" "tiktoken per doc" "tiktoken batch" \
        --record "$OUT/native.md" 2>&1 | tee "$OUT/native.log"
      echo "native: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      ;;
    scaling)
      timeout "${SCALING_S:-150}" python3 bench/bench_scaling.py --threads 1 2 4 8 16 \
        --mb "${SCALING_MB:-8}" --repeat 2 --kinds prose multilingual \
        --record "$OUT/scaling.md" 2>&1 | tee "$OUT/scaling.log"
      echo "scaling: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      ;;
    train)
      timeout "${TRAIN_S:-500}" python3 bench/bench_train.py --mb "${TRAIN_MB:-256}" \
        --vocab-size "${TRAIN_VOCAB:-65536}" --backend native --repeat "${TRAIN_REPEAT:-1}" \
        --trainers gputok-cuda gputok hf ${TRAIN_PEERS-gigatoken} \
        --out "$OUT/train.md" 2>&1 | tee "$OUT/train.log"
      echo "train: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      ;;
    kernels)
      trees="${KERNEL_TREES:-$PWD}"
      for tree in $trees; do
        [ "$tree" = "$PWD" ] || cp bench/bench_cuda.py bench/_common.py bench/peers.py "$tree/bench/"
      done
      i=0
      for round in $(seq "${KERNEL_ROUNDS:-1}"); do
        for tree in $trees; do
          i=$((i + 1))
          echo "== kernels run $i (round $round): $tree"
          (cd "$tree" && timeout "${KERNELS_S:-120}" python3 bench/bench_cuda.py --kernels-only \
            --size-mb "${KERNEL_MB:-128}" --repeat "${REPEAT:-5}" \
            --encodings cl100k_base o200k_base --out "$OUT/kernels-$i.md")
        done
      done 2>&1 | tee "$OUT/kernels.log"
      echo "kernels: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s)"
      ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
