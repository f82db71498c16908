#!/usr/bin/env bash
# Training throughput on one GPU: Horizon (bf16 and fp32) against the same model in PyTorch (bf16
# autocast: eager with SDPA/FlashAttention, eager with naive attention, then torch.compile + SDPA
# when time remains), round by round, the GPT-2-small shape (recipes/bench/gpt2_small.yaml, T 1024)
# first, then the quickstart shape. Every result is appended to $HZ_BENCH_OUT (JSON lines) the
# moment it arrives, so a run cut short keeps what finished; scripts/bench_train_table.py makes the
# markdown table: tokens/s (median of rounds), MFU against the GPU's dense peak (H100/H200: 989
# bf16, 66.9 fp32 TFLOP/s), peak memory, forward / backward / update shares, ratio to PyTorch
# eager bf16.
#   scripts/bench_train_gpu.sh [rounds, default 1]
# Environment: HZ_BUILD_DIR (default build), HZ_PYTHON (python3), HZ_BENCH_OUT (default a temporary
# file, printed as a table at the end), HZ_BENCH_DEADLINE (epoch seconds: nothing starts after it;
# torch.compile, the slowest to start, only when 120 s remain before it).
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-1}
HZ=${HZ_BUILD_DIR:-build}/horizon
PY=${HZ_PYTHON:-python3}
out=${HZ_BENCH_OUT:-$(mktemp)}
deadline=${HZ_BENCH_DEADLINE:-0}
: > "$out"
time_for() { [ "$deadline" = 0 ] || [ $(( deadline - $(date +%s) )) -ge "$1" ]; }
# name | horizon recipe | torch shape flags
shapes=("gpt2-small|recipes/bench/gpt2_small.yaml|--V 50304 --d 768 --L 12 --H 12 --hidden 3072 --T 1024 --B 16 --mlp gelu"
        "quickstart|recipes/quickstart.yaml|--V 259 --d 128 --L 4 --H 4 --hidden 344 --T 256 --B 8 --mlp swiglu")
for r in $(seq "$ROUNDS"); do
  for sh in "${shapes[@]}"; do
    IFS='|' read -r name recipe flags <<< "$sh"
    for prec in bf16 fp32; do
      time_for 30 || { echo "[bench_train_gpu] deadline: Horizon $name $prec not run" >&2; continue; }
      echo "[bench_train_gpu] Horizon $name $prec" >&2
      "$HZ" bench train "$recipe" --steps 10 run.device=cuda run.precision=$prec |
        sed "s/^{/{\"shape\": \"$name\", /" >> "$out"
    done
    for variant in "--attn sdpa" "--attn naive" "--attn sdpa --compile"; do
      need=30; [[ $variant == *compile* ]] && need=120
      time_for $need || { echo "[bench_train_gpu] deadline: PyTorch $name $variant not run" >&2; continue; }
      echo "[bench_train_gpu] PyTorch $name $variant" >&2
      $PY scripts/bench_train_torch.py $flags --steps 10 --device cuda --dtype bf16 $variant --peak 989 |
        sed "s/^{/{\"shape\": \"$name\", /" >> "$out"
    done
  done
done
$PY scripts/bench_train_table.py "$out"
[ -n "${HZ_BENCH_OUT:-}" ] || rm -f "$out"
