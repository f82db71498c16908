#!/usr/bin/env bash
# Chunked attention (Llama 4) and sink tokens beside a sliding window (StreamingLLM, gpt-oss) on the
# CPU: what each costs against its visible pairs (a chunk of C at T costs T/C times less than causal;
# S sinks beside a window of W cost (W + S)/W of the window), side by side with PyTorch's SDPA with a
# boolean mask (scripts/bench/bench_masks_torch.py; lengths interleaved so machine noise hits both).
#   scripts/bench/bench_masks.sh [T list, default 8192,32768] [reps, default 2] [chunk, default T/4]
# PyTorch runs up to HZ_TORCH_MAX_T (default 16384): its masked kernel computes every block.
set -euo pipefail
cd "$(dirname "$0")/../.."
TS=${1:-8192,32768}
REPS=${2:-2}
TORCH_MAX_T=${HZ_TORCH_MAX_T:-16384}
scripts/setup.sh >/dev/null
PY=$(scripts/tools/venv.sh)
out=$(mktemp -d)
for T in ${TS//,/ }; do
  C=${3:-$((T / 4))}
  masks="causal,chunk$C,swa,sink4"
  build/horizon bench attention --T "$T" --masks "$masks" --window 128 --reps "$REPS" --json "$out/hz_$T.json" >&2
  if [ "$T" -le "$TORCH_MAX_T" ]; then
    OMP_NUM_THREADS=2 "$PY" scripts/bench/bench_masks_torch.py --T "$T" --masks "$masks" --window 128 \
      --reps "$REPS" > "$out/torch_$T.json"
  fi
done
cat "$out"/*.json | "$PY" scripts/bench/bench_masks_table.py
rm -rf "$out"
