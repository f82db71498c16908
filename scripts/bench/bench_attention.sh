#!/usr/bin/env bash
# Side-by-side attention benchmark: Horizon's fused op vs naive PyTorch (Debian python3-torch,
# materialised scores) on this machine, lengths interleaved (Horizon T, torch T, next T ...) so
# machine noise hits both alike. Prints one table with the ratios.
#   scripts/bench/bench_attention.sh [T list, default 1024,2048,4096,8192,16384] [reps, default 3]
# PyTorch is skipped where its (B, H, T, T) score tensors would not fit (HZ_TORCH_MAX_T, default 8192).
set -euo pipefail
cd "$(dirname "$0")/../.."
TS=${1:-1024,2048,4096,8192,16384}
REPS=${2:-3}
TORCH_MAX_T=${HZ_TORCH_MAX_T:-8192}
scripts/setup.sh >/dev/null
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  apt-get install -y -qq --no-install-recommends python3-torch libopenblas0-openmp >/dev/null
fi
out=$(mktemp -d)
for T in ${TS//,/ }; do
  build/horizon bench attention --T "$T" --reps "$REPS" --json "$out/hz_$T.json" >&2
  if [ "$T" -le "$TORCH_MAX_T" ]; then
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=2 \
      /usr/bin/python3 scripts/bench/bench_attention_torch.py --T "$T" --reps "$REPS" > "$out/torch_$T.json"
  fi
done
cat "$out"/*.json | /usr/bin/python3 scripts/bench/bench_table.py
rm -rf "$out"
