#!/usr/bin/env bash
# The GPU proof (docs/gpu.md), ready to run as is on a machine with a CUDA or
# Apple MPS GPU: installs the gpu extra, runs the array-path tests on it, checks
# CPU-vs-GPU losses and rerun bytes, and benches large / medium / gpu on the
# device, on the CPU, and against PyTorch eager + SDPA. Results: $OUT (JSON).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_proof}
PY=.venv/bin/python
mkdir -p "$OUT"

make setup
$PY -m pip install -q -e '.[dev,gpu]'
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

# 1. the same tests as make test, through PyTorch (CPU tensors and the GPU)
$PY -m pytest -q -rs tests/model/test_model_backend.py tests/model/test_model_generic.py \
    tests/model/test_model_device.py tests/train/test_loop_device.py \
    | tee "$OUT/tests.txt" || echo "GPU TESTS FAILED"

# 1b. the real command line on the device: the default job's knobs, then the coder job
.venv/bin/spark train --dataset data/train/dataset.jsonl --out "$OUT/job-gpu" --device auto \
    > "$OUT/train_default.json" || echo "SPARK TRAIN ON THE DEVICE FAILED"

# 2. losses within float32 rounding of the CPU's, and a rerun gives the same bytes
$PY tools/gpu_compare.py --scale tiny --steps 100 --optimizer sgd | tee "$OUT/compare_tiny.json" || echo "LOSS/BYTES CHECK FAILED (tiny)"
$PY tools/gpu_compare.py --scale large --steps 50 | tee "$OUT/compare_large.json" || echo "LOSS/BYTES CHECK FAILED (large)"

# 3. tokens/s: this project on the device and on one CPU thread, and the PyTorch peer
for scale in large medium gpu; do
  .venv/bin/spark bench --scale "$scale" --device auto --json > "$OUT/bench_${scale}_device.json"
  $PY tools/torch_peer_gpu.py --scale "$scale" > "$OUT/peer_${scale}.json"
done
for scale in large medium; do
  SPARK_BLAS_THREADS=1 .venv/bin/spark bench --scale "$scale" --device cpu --json \
    > "$OUT/bench_${scale}_cpu.json"
done
SPARK_BLAS_THREADS=1 .venv/bin/spark bench --scale gpu --device cpu --steps 2 --json \
  > "$OUT/bench_gpu_cpu.json"

$PY - "$OUT" <<'PYEOF'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
load = lambda n: json.loads((out / n).read_text())
print(f"{'scale':8} {'cpu tok/s':>12} {'device tok/s':>13} {'x cpu':>7} {'peer tok/s':>12} {'vs peer':>8}")
for s in ("large", "medium", "gpu"):
    cpu, dev, peer = load(f"bench_{s}_cpu.json"), load(f"bench_{s}_device.json"), load(f"peer_{s}.json")
    c, d, p = cpu["tokens_per_s"], dev["tokens_per_s"], peer["tokens_per_s"]
    print(f"{s:8} {c:12,.0f} {d:13,.0f} {d / c:7.1f} {p:12,.0f} {d / p:8.2f}   ({dev['device']})")
for n in ("compare_tiny.json", "compare_large.json"):
    r = load(n)
    print(f"{r['scale']}: max rel loss diff vs CPU {r['max_rel_loss_diff']:.2e}, rerun same bytes {r['rerun_same_bytes']}")
PYEOF
