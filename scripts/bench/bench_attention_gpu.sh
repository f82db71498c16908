#!/usr/bin/env bash
# GPU attention benchmark, side by side in one run: Horizon's fused op (`horizon bench attention
# --device cuda`, bf16: its own tensor-core kernels, with the two-pass backward and the one-pass one
# (HZ_ATTN_BACKWARD=one_pass), the kernels on Hopper's wgmma (HZ_ATTN_MMA=wgmma, and its forward
# in the lab's other forms: wgmma_overlap, wgmma_serial), and cuDNN's
# fused attention for the causal and
# sliding-window cases it routes there) and PyTorch on the
# same GPU (SDPA's flash backend for causal, FlexAttention with BlockMasks for causal, SWA, SCOPE's
# per-head windows and scale-invariant logits as a score_mod; scripts/bench/bench_attention_gpu.py).
# Lengths interleaved (Horizon T, PyTorch T, next T ...), shapes as FlashAttention's benchmark
# (hidden 2048: H = 2048 / D; B = 16384 / T). Prints one table (scripts/bench/bench_table_gpu.py) and
# leaves the JSON lines in $HZ_BENCH_OUT (default a temporary folder).
#   scripts/bench/bench_attention_gpu.sh [T list, default 1024,2048,4096,8192,16384,32768] [D list, default 64,128] [reps, default 10]
# Each result is a file of its own in $HZ_BENCH_OUT the moment it arrives (a run cut short keeps
# them; scripts/bench/bench_table_gpu.py tabulates whatever is there). A failing length does not stop
# the others.
# Environment: HZ_BUILD_DIR (default build), HZ_PYTHON (default python3; needs torch with CUDA),
# HZ_BENCH_DEADLINE (epoch seconds: no length starts within 20 s of it), HZ_BENCH_FLEX_T (the
# lengths at which FlexAttention runs, default all: each of its cases costs a torch.compile of
# tens of seconds; SDPA runs at every length; empty: none), HZ_BENCH_RESUME=1 (a length and head dim whose
# results are already in $HZ_BENCH_OUT are not measured again).
set -uo pipefail
cd "$(dirname "$0")/../.."
TS=${1:-1024,2048,4096,8192,16384,32768}
DS=${2:-64,128}
REPS=${3:-10}
BUILD=${HZ_BUILD_DIR:-build}
PY=${HZ_PYTHON:-python3}
out=${HZ_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$out"
have_torch=1
"$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || {
  have_torch=0
  echo "[bench_attention_gpu] $PY has no CUDA PyTorch: Horizon's side only" >&2
}
deadline=${HZ_BENCH_DEADLINE:-0}
flex_t=${HZ_BENCH_FLEX_T-all}
for T in ${TS//,/ }; do  # lengths outer: both head dims at each length before the next
  for D in ${DS//,/ }; do
    if [ "$deadline" != 0 ] && [ $(( deadline - $(date +%s) )) -lt 20 ]; then
      echo "[bench_attention_gpu] deadline: D=$D T=$T not run" >&2
      continue
    fi
    if [ "${HZ_BENCH_RESUME:-0}" = 1 ] && [ -s "$out/hz_${D}_${T}.json" ] &&
       { [ $have_torch = 0 ] || [ -s "$out/torch_${D}_${T}.json" ]; }; then
      echo "[bench_attention_gpu] D=$D T=$T: measured by an earlier run" >&2
      continue
    fi
    echo "[bench_attention_gpu] D=$D T=$T" >&2
    "$BUILD/horizon" bench attention --device cuda --D "$D" --T "$T" --reps "$REPS" --impl tensor_core \
      --masks causal,swa,scope,docs2048,chunk2048,sink4 --logits identity,scale_invariant \
      --json "$out/hz_${D}_${T}.json" >&2 ||
      echo "[bench_attention_gpu] Horizon failed at D=$D T=$T" >&2
    # the one-pass backward (HZ_ATTN_BACKWARD=one_pass; both variants)
    HZ_ATTN_BACKWARD=one_pass "$BUILD/horizon" bench attention --device cuda --D "$D" --T "$T" --reps "$REPS" \
      --impl tensor_core --masks causal,swa,scope,docs2048,chunk2048,sink4 --logits identity,scale_invariant \
      --json "$out/hz1p_${D}_${T}.json" >&2 ||
      echo "[bench_attention_gpu] Horizon's one-pass backward failed at D=$D T=$T" >&2
    # the kernels on Hopper's wgmma (HZ_ATTN_MMA=wgmma; plain kernels, bf16: rows tensor_core_wg)
    HZ_ATTN_MMA=wgmma "$BUILD/horizon" bench attention --device cuda --D "$D" --T "$T" --reps "$REPS" \
      --impl tensor_core --masks causal,swa,scope,docs2048 --logits identity,scale_invariant \
      --json "$out/hzwg_${D}_${T}.json" >&2 ||
      echo "[bench_attention_gpu] Horizon's wgmma kernels failed at D=$D T=$T" >&2
    # the wgmma forward's other forms against tensor_core_wg's (FlashAttention-3's): overlapped
    # without the producer warpgroup (HZ_ATTN_MMA=wgmma_overlap, rows tensor_core_wgo) and without
    # overlap (wgmma_serial, rows tensor_core_wgs)
    for form in overlap serial; do
      HZ_ATTN_MMA=wgmma_$form "$BUILD/horizon" bench attention --device cuda --D "$D" --T "$T" --reps "$REPS" \
        --impl tensor_core --masks causal --logits identity --json "$out/hzwg${form:0:1}_${D}_${T}.json" >&2 ||
        echo "[bench_attention_gpu] Horizon's wgmma forward ($form) failed at D=$D T=$T" >&2
    done
    # both: the one-pass backward on wgmma (rows tensor_core_wg_1p)
    HZ_ATTN_MMA=wgmma HZ_ATTN_BACKWARD=one_pass "$BUILD/horizon" bench attention --device cuda --D "$D" --T "$T" \
      --reps "$REPS" --impl tensor_core --masks causal,swa,docs2048,sink4 --logits identity \
      --json "$out/hzwg1p_${D}_${T}.json" >&2 ||
      echo "[bench_attention_gpu] Horizon's one-pass backward on wgmma failed at D=$D T=$T" >&2
    # cuDNN's fused attention, where Horizon routes what it expresses (attention/backend.h)
    "$BUILD/horizon" bench attention --device cuda --D "$D" --T "$T" --reps "$REPS" --impl cudnn \
      --masks causal,swa --logits identity --json "$out/hzcudnn_${D}_${T}.json" >&2 ||
      echo "[bench_attention_gpu] Horizon through cuDNN failed at D=$D T=$T" >&2
    if [ $have_torch = 1 ]; then
      flex=()
      [ "$flex_t" = all ] || [[ ",$flex_t," == *",$T,"* ]] || flex=(--flex-cases "")
      "$PY" scripts/bench/bench_attention_gpu.py --D "$D" --T "$T" --reps "$REPS" \
        --masks causal,swa,scope,docs2048,chunk2048,sink4 "${flex[@]}" > "$out/torch_${D}_${T}.json" \
        2> "$out/torch_${D}_${T}.err" || echo "[bench_attention_gpu] PyTorch failed at D=$D T=$T (see $out/torch_${D}_${T}.err)" >&2
    fi
  done
done
cat "$out"/*.json | "$PY" scripts/bench/bench_table_gpu.py
