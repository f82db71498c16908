#!/usr/bin/env bash
# Training throughput: Horizon vs the same model in PyTorch (Debian python3-torch, fp32, AdamW,
# 2 threads, OpenMP OpenBLAS), interleaved A B A B so machine noise hits both; prints medians
# and the ratio.   scripts/bench_train.sh [recipe, default recipes/quickstart.yaml] [rounds, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
RECIPE=${1:-recipes/quickstart.yaml}
ROUNDS=${2:-3}
scripts/setup.sh >/dev/null
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  apt-get install -y -qq --no-install-recommends python3-torch libopenblas0-openmp >/dev/null
fi
out=$(mktemp)
for i in $(seq "$ROUNDS"); do
  OMP_NUM_THREADS=2 build/horizon bench train "$RECIPE" --steps 15 >> "$out"
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=2 \
    /usr/bin/python3 scripts/bench_train_torch.py --steps 15 >> "$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
hz = [r["tok_per_s"] for r in rows if r["impl"] == "horizon"]
th = [r["tok_per_s"] for r in rows if r["impl"] == "torch"]
p = {r["impl"]: r["params"] for r in rows}
print(f"{'impl':>8} {'params':>9} {'tok/s (median of rounds)':>26} {'rounds':>30}")
print(f"{'horizon':>8} {p['horizon']:>9} {statistics.median(hz):>26.0f} {str([round(x) for x in hz]):>30}")
print(f"{'torch':>8} {p['torch']:>9} {statistics.median(th):>26.0f} {str([round(x) for x in th]):>30}")
print(f"horizon / torch = {statistics.median(hz) / statistics.median(th):.2f}")
PY
rm -f "$out"
