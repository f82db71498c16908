#!/usr/bin/env bash
# f32 attention on a GPU, side by side in one run: Horizon's tensor-core kernels on bf16 pairs (the
# split kernels, what an fp32 run gets at head_dim 64 and 128), Horizon's reference kernels (exact f32:
# run.exact_f32_attention, timed at the shorter lengths only, they take about 100 s at 8K) and what a
# PyTorch user picks for f32 (SDPA's memory-efficient backend: the flash backend takes no f32;
# scripts/bench/bench_attention_gpu.py --dtype f32). Causal, forward+backward, FlashAttention's
# shapes (H = 2048 / D, B = 16384 / T). Prints one table (scripts/bench/bench_table_f32.py).
#   scripts/bench/bench_attention_f32.sh [T list, default 2048,8192] [D list, default 64,128] [reps, default 5]
# Environment: HZ_BUILD_DIR (default build), HZ_PYTHON (default python3; needs torch with CUDA),
# HZ_BENCH_OUT (the JSON lines, default a temporary folder), HZ_BENCH_REF_T (the lengths at which
# the reference kernels run, default 2048).
set -uo pipefail
cd "$(dirname "$0")/../.."
TS=${1:-2048,8192}
DS=${2:-64,128}
REPS=${3:-5}
BUILD=${HZ_BUILD_DIR:-build}
PY=${HZ_PYTHON:-python3}
out=${HZ_BENCH_OUT:-$(mktemp -d)}
ref_t=${HZ_BENCH_REF_T-2048}
mkdir -p "$out"
have_torch=1
"$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || {
  have_torch=0
  echo "[bench_attention_f32] $PY has no CUDA PyTorch: Horizon's side only" >&2
}
for T in ${TS//,/ }; do
  for D in ${DS//,/ }; do
    echo "[bench_attention_f32] D=$D T=$T" >&2
    "$BUILD/horizon" bench attention --device cuda --dtype f32 --impl tensor_core --D "$D" --T "$T" --reps "$REPS" \
      --masks causal --logits identity --json "$out/hz_tc_${D}_${T}.json" >&2 ||
      echo "[bench_attention_f32] Horizon (tensor cores) failed at D=$D T=$T" >&2
    if [[ ",$ref_t," == *",$T,"* ]]; then
      "$BUILD/horizon" bench attention --device cuda --dtype f32 --impl reference --D "$D" --T "$T" --reps 3 \
        --masks causal --logits identity --json "$out/hz_ref_${D}_${T}.json" >&2 ||
        echo "[bench_attention_f32] Horizon (reference) failed at D=$D T=$T" >&2
    fi
    if [ $have_torch = 1 ]; then
      "$PY" scripts/bench/bench_attention_gpu.py --dtype f32 --D "$D" --T "$T" --reps "$REPS" --masks causal \
        --logits identity --flex-cases "" > "$out/torch_${D}_${T}.json" 2> "$out/torch_${D}_${T}.err" ||
        echo "[bench_attention_f32] PyTorch failed at D=$D T=$T (see $out/torch_${D}_${T}.err)" >&2
    fi
  done
done
cat "$out"/*.json 2>/dev/null | python3 scripts/bench/bench_table_f32.py
