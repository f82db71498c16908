#!/usr/bin/env bash
# Training throughput on one GPU: Horizon (bf16 and fp32) against the same model in PyTorch (bf16
# autocast: eager with SDPA/FlashAttention, torch.compile + SDPA when time remains, eager with naive
# attention), round by round, the GPT-2-small shape (recipes/bench/gpt2_small.yaml, T 1024) first,
# then the quickstart shape. Every result is appended to $HZ_BENCH_OUT (JSON lines) the
# moment it arrives, so a run cut short keeps what finished; scripts/bench/bench_train_table.py makes the
# markdown table: tokens/s (median of rounds), MFU against the GPU's dense peak (H100/H200: 989
# bf16, 66.9 fp32 TFLOP/s), peak memory, forward / backward / update shares, ratio to PyTorch
# eager bf16; and the per-op profile of one GPT-2 bf16 step (`horizon bench train --profile`).
#   scripts/bench/bench_train_gpu.sh [rounds, default 1]
# Environment: HZ_BUILD_DIR (default build), HZ_PYTHON (python3), HZ_BENCH_OUT (default a temporary
# file, printed as a table at the end), HZ_BENCH_DEADLINE (epoch seconds: nothing starts after it;
# torch.compile, the slowest to start, only when 120 s remain before it).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-1}
HZ=${HZ_BUILD_DIR:-build}/horizon
PY=${HZ_PYTHON:-python3}
out=${HZ_BENCH_OUT:-$(mktemp)}
deadline=${HZ_BENCH_DEADLINE:-0}
: > "$out"
time_for() { [ "$deadline" = 0 ] || [ $(( deadline - $(date +%s) )) -ge "$1" ]; }
declare -A recipe=([gpt2-small]=recipes/bench/gpt2_small.yaml [quickstart]=recipes/quickstart.yaml)
declare -A shape=([gpt2-small]="--V 50304 --d 768 --L 12 --H 12 --hidden 3072 --T 1024 --B 16 --mlp gelu"
                  [quickstart]="--V 259 --d 128 --L 4 --H 4 --hidden 344 --T 256 --B 8 --mlp swiglu")
# The runs of one round in priority order (a short lease keeps the first): what docs/performance.md's table
# needs (GPT-2-small bf16, Horizon vs PyTorch eager, then torch.compile), then the extras.
# impl | shape | seconds it needs before the deadline | precision or PyTorch flags
runs=("horizon|gpt2-small|30|bf16" "torch|gpt2-small|30|--attn sdpa" "torch|gpt2-small|120|--attn sdpa --compile"
      "horizon|gpt2-small|30|fp32" "torch|gpt2-small|30|--attn naive"
      "horizon|quickstart|30|bf16" "horizon|quickstart|30|fp32" "torch|quickstart|30|--attn sdpa"
      "torch|quickstart|30|--attn naive" "torch|quickstart|120|--attn sdpa --compile")
for r in $(seq "$ROUNDS"); do
  for run in "${runs[@]}"; do
    IFS='|' read -r impl name need arg <<< "$run"
    time_for "$need" || { echo "[bench_train_gpu] deadline: $impl $name $arg not run" >&2; continue; }
    echo "[bench_train_gpu] $impl $name $arg (round $r)" >&2
    if [ "$impl" = horizon ]; then
      # the first GPT-2 bf16 run also profiles one step per op (--profile: one step more)
      prof=(); [ "$name|$arg|$r" = "gpt2-small|bf16|1" ] && prof=(--profile)
      "$HZ" bench train "${recipe[$name]}" --steps 10 "${prof[@]}" run.device=cuda run.precision="$arg"
    else
      # shellcheck disable=SC2086  # the shape and the flags are word lists
      $PY scripts/bench/bench_train_torch.py ${shape[$name]} --steps 10 --device cuda --dtype bf16 $arg --peak 989
    fi | sed "s/^{/{\"shape\": \"$name\", /" >> "$out"
  done
done
$PY scripts/bench/bench_train_table.py "$out"
[ -n "${HZ_BENCH_OUT:-}" ] || rm -f "$out"
