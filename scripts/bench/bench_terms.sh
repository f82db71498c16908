#!/usr/bin/env bash
# The cost of attention sinks and FoX forget gates in the fused kernels, side by side with what a
# PyTorch user would run on this CPU (scripts/bench/bench_terms_torch.py: SDPA with FoX's bias as a
# materialised mask, the gpt-oss sink column), lengths interleaved so machine noise hits both alike.
# Prints one table: per T and terms, Horizon's forward+backward time, its ratio to Horizon's plain
# causal attention (the issue's target: at most 1.15), PyTorch's time and Horizon's speedup.
#   scripts/bench/bench_terms.sh [T list, default 4096,8192,16384] [reps, default 3]
set -euo pipefail
cd "$(dirname "$0")/../.."
TS=${1:-4096,8192,16384}
REPS=${2:-3}
scripts/setup.sh >/dev/null
PY=$(scripts/tools/venv.sh)
out=$(mktemp -d)
for T in ${TS//,/ }; do
  build/horizon bench attention --T "$T" --masks causal --terms none,sink,fox,sink+fox --reps "$REPS" \
    --json "$out/hz_$T.json" >&2
  OMP_NUM_THREADS=2 "$PY" scripts/bench/bench_terms_torch.py --T "$T" --reps "$REPS" > "$out/torch_$T.json"
done
cat "$out"/*.json | "$PY" scripts/bench/bench_terms_table.py
rm -rf "$out"
