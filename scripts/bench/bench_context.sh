#!/usr/bin/env bash
# Context parallelism on this machine: one training step of a global-attention model and of a
# SWAN stack split over N = 1, 2, 4 ranks (parallel.context=N, mpirun), at T from 8K to 64K,
# batch 1, f32, the global layers over the ring and over the all-gather (parallel.context_exchange). Both models are recipes/pretrain_swan.yaml's shape at 4 layers (d_model 256,
# 8 heads, SwiGLU): "swan" keeps its pattern [global NoPE, SWA-RoPE x 3] (window 128), "global"
# makes every layer global NoPE. Ranks x threads is 2 for N 1 and 2 (the machine's cores); N 4
# runs 4 single-thread ranks on the 2 cores (oversubscribed: its times are not comparable, its
# bytes and memory are). Per setting: step time, rank 0's measured peak and the memory plan, and
# the k/v bytes the busiest rank sent (measured, metrics.jsonl context_bytes) next to the plan's; then
# per layer kind, and a projection of the traffic to 8 GPUs at 128K-1M tokens over two links.
# Results go to runs/bench_context/results.jsonl as they arrive; a rerun skips what is there.
#   scripts/bench/bench_context.sh [global lengths, default 8192,16384,32768] [swan lengths, default 8192,16384,32768,65536]
set -euo pipefail
cd "$(dirname "$0")/../.."
GLOBAL_T=${1:-8192,16384,32768}
SWAN_T=${2:-8192,16384,32768,65536}
[ -x build/horizon ] || scripts/setup.sh >/dev/null
out=runs/bench_context/results.jsonl
mkdir -p runs/bench_context
touch "$out"
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader \
  --mca btl_vader_single_copy_mechanism none --mca oob_tcp_if_include lo --mca btl_base_warn_component_unused 0"
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
COMMON=(model.n_layers=4 data.batch_size=1 train.steps=1 train.log_every=1 schedule.warmup_steps=0 eval.every=0
        checkpoint.every=0 eval.lengths=[512] eval.batches=1 data.cache_dir=runs/bench_context/data run.out_dir="$scratch")
build/horizon data prepare recipes/pretrain_swan.yaml "${COMMON[@]}" > /dev/null
run() {  # model T N exchange
  local model=$1 T=$2 N=$3 ex=$4 extra=() threads=$(( 2 / $3 > 0 ? 2 / $3 : 1 ))
  grep -q "\"model\": \"$model\", \"T\": $T, \"N\": $N, \"exchange\": \"$ex\"," "$out" && return 0
  [ "$model" = global ] && extra=(model.pattern=[global_nope])
  [ "$N" = 1 ] || extra+=(parallel.context_exchange="$ex")
  echo "[bench_context] $model T $T N $N $ex ($N ranks x $threads threads)" >&2
  local name="${model}_${T}_${N}_${ex}"
  local cmd=(build/horizon train recipes/pretrain_swan.yaml "${COMMON[@]}" "${extra[@]}" data.seq_len="$T" run.name="$name")
  if [ "$N" = 1 ]; then OMP_NUM_THREADS=$threads "${cmd[@]}" > "$scratch/log" 2>&1
  else $MPIRUN -np "$N" -x OMP_NUM_THREADS=$threads "${cmd[@]}" parallel.context="$N" > "$scratch/log" 2>&1; fi
  local info
  info=$(build/horizon info recipes/pretrain_swan.yaml "${COMMON[@]}" "${extra[@]}" data.seq_len="$T")
  python3 - "$scratch/$name/metrics.jsonl" "$model" "$T" "$N" "$threads" "$ex" <<PY >> "$out"
import json, sys, re
m = [json.loads(l) for l in open(sys.argv[1]) if '"tok_per_s"' in l][-1]
info = """$info"""
plan = {}
for line in info.splitlines():  # horizon info's context-parallel lines: "N = 2: 4.0 MiB per step (...)"
    mm = re.match(r"\s*N = (\d+): ([0-9.]+) (MiB|GiB) per step", line)
    if mm: plan[int(mm.group(1))] = float(mm.group(2)) * (1024 if mm.group(3) == "GiB" else 1)
model, T, N, threads, ex = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
print(json.dumps({"model": model, "T": T, "N": N, "exchange": ex, "threads": threads, "step_s": T / m["tok_per_s"],
                  "mem_peak": m["mem_peak"], "mem_plan": m["mem_plan"], "context_bytes": m.get("context_bytes", 0),
                  "plan_bytes": plan.get(N, 0) * 2**20}))
PY
}
IFS=',' read -ra GT <<< "$GLOBAL_T"; IFS=',' read -ra ST <<< "$SWAN_T"
for T in "${GT[@]}"; do run global "$T" 1 -; for N in 2 4; do for ex in ring all_gather; do run global "$T" "$N" $ex; done; done; done
for T in "${ST[@]}"; do run swan "$T" 1 -; for N in 2 4; do for ex in ring all_gather; do run swan "$T" "$N" $ex; done; done; done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mib, gib = 2**20, 2**30
rows = [r for r in rows if "exchange" in r]  # rows from before the ring
print("| model | T | N | global layers | ranks x threads | step (s) | peak / rank (GiB) | plan (GiB) | k/v sent / rank / step (MiB) | plan (MiB) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in sorted(rows, key=lambda r: (r["model"], r["T"], r["N"], r["exchange"])):
    sent = f"{r['context_bytes'] / mib:.2f}" if r["N"] > 1 else "-"
    plan = f"{r['plan_bytes'] / mib:.2f}" if r["N"] > 1 else "-"
    print(f"| {r['model']} | {r['T']} | {r['N']} | {r['exchange']} | {r['N']} x {r['threads']} | {r['step_s']:.1f} | "
          f"{r['mem_peak'] / gib:.2f} | {r['mem_plan'] / gib:.2f} | {sent} | {plan} |")
# per layer kind, from the exchange rules (distributed/context/exchange.h): an all-gather layer sends k and v,
# (N - 1) x T / 2N x 2 rows each, forward, and as many gradient rows in backward; a ring layer sends
# T - T / N rows of k and v forward and again backward, and T rows of dK/dV in f32; a window-W
# layer sends at most 2 (W - 1) rows of each, both ways. 8 heads of 32 dims here (Hkv D = 256).
HkvD, W = 256, 128
def per_layer(kind, T, N, a):
    if kind == "ring":
        return 2 * 2 * (T - T // N) * HkvD * a + 2 * T * HkvD * 4
    rows = (N - 1) * (T // N) if kind == "all_gather" else 2 * (W - 1)
    return 2 * 2 * rows * HkvD * a  # k and v, forward and backward
print("\nProjection to N = 8 GPUs (bf16 k/v, this shape, 4 layers; bytes one rank sends per step; time at two links:"
      " NVLink 4 at 450 GB/s per direction, InfiniBand NDR at 50 GB/s)")
print("| T | global layers | global layer (MiB) | window layer (MiB) | global model (MiB) | SWAN stack (MiB) | SWAN / global | global @ NVLink (ms) | SWAN @ NVLink (ms) | global @ IB (ms) | SWAN @ IB (ms) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for T in (131072, 262144, 524288, 1048576):
    for kind in ("all_gather", "ring"):
        g, w = per_layer(kind, T, 8, 2), per_layer("window", T, 8, 2)
        gm, sm = 4 * g, g + 3 * w
        print(f"| {T} | {kind} | {g / mib:.1f} | {w / mib:.2f} | {gm / mib:.1f} | {sm / mib:.1f} | {sm / gm:.3f} | "
              f"{gm / 450e9 * 1e3:.2f} | {sm / 450e9 * 1e3:.2f} | {gm / 50e9 * 1e3:.1f} | {sm / 50e9 * 1e3:.1f} |")
PY
