#!/usr/bin/env bash
# Long context within memory: peak memory and step time of one training step of the GPT-2-124M
# shape (recipes/bench/gpt2_small.yaml, batch 1) for each length, train.recompute setting
# (none / attention / layer) and loss (the full (T, V) logits, train.loss_chunk=0, or the chunked
# LM head, train.loss_chunk=-1), measured with `horizon bench train` on the CPU. A setting whose
# memory plan exceeds this machine's memory is not started and shows as "does not fit" with the
# plan's figure. Results go to runs/bench_memory/results.jsonl as they arrive; a rerun skips the
# settings already there (delete the file to start over), so an interrupted sweep resumes.
# Prints a markdown table: step time, its ratio to recompute none at the same length and loss,
# the tensors' measured peak (the CPU allocator's), the plan's prediction and their ratio, and the
# process's resident peak (VmHWM, what top shows) with the plan's prediction for it and their ratio.
#   scripts/bench/bench_memory.sh [lengths, default 4096,8192,16384,32768,65536] [threads, default 2]
#   HZ_BENCH_WARMUP=1 HZ_BENCH_STEPS=2 scripts/bench/bench_memory.sh 4096    # more steps, median
set -euo pipefail
cd "$(dirname "$0")/../.."
LENGTHS=${1:-4096,8192,16384,32768,65536}
THREADS=${2:-2}
WARMUP=${HZ_BENCH_WARMUP:-0}
STEPS=${HZ_BENCH_STEPS:-1}
[ -x build/horizon ] || scripts/setup.sh >/dev/null
out=runs/bench_memory/results.jsonl
mkdir -p "$(dirname "$out")"
touch "$out"
# what the allocator may use: the machine's memory less 1.5 GiB for the OS, BLAS and the binary
limit=$(awk '/^MemTotal:/ {printf "%.1f", $2 / 1048576 - 1.5}' /proc/meminfo)
echo "[bench_memory] lengths $LENGTHS, $THREADS threads, warm-up $WARMUP, steps $STEPS, limit $limit GiB -> $out" >&2
IFS=',' read -ra Ts <<< "$LENGTHS"
for T in "${Ts[@]}"; do
  for loss in -1 0; do
    for rc in none attention layer; do
      key="\"T\": $T, \"B\": 1, \"recompute\": \"$rc\", \"loss_chunk\": "
      if [ "$loss" = "0" ]; then pat="${key}0,"; else pat="${key}[1-9]"; fi
      if grep -q "$pat" "$out"; then continue; fi
      echo "[bench_memory] T $T recompute $rc loss_chunk $loss" >&2
      OMP_NUM_THREADS=$THREADS build/horizon bench train recipes/bench/gpt2_small.yaml --warmup "$WARMUP" \
        --steps "$STEPS" --max-gib "$limit" data.batch_size=1 data.seq_len="$T" train.recompute="$rc" \
        train.loss_chunk="$loss" | grep '^{' >> "$out"
    done
  done
done
python3 - "$out" "$LENGTHS" <<'PY'
import json, sys
want = {int(t) for t in sys.argv[2].split(",")}
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
rows = [r for r in rows if r["T"] in want]
gib = lambda b: b / 2**30
base = {(r["T"], r["loss_chunk"] > 0): r["step_ms"] for r in rows if r["recompute"] == "none" and "step_ms" in r}
print("| T | loss | recompute | step (s) | vs none | tok/s | tensors peak (GiB) | plan (GiB) | plan / peak "
      "| process peak (GiB) | plan (GiB) | plan / peak |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
order = {"none": 0, "attention": 1, "layer": 2}
for r in sorted(rows, key=lambda r: (r["T"], r["loss_chunk"] == 0, order[r["recompute"]])):
    loss = f"chunked ({r['loss_chunk']} rows)" if r["loss_chunk"] > 0 else "full logits"
    if "skipped" in r:
        print(f"| {r['T']} | {loss} | {r['recompute']} | does not fit | | | | {gib(r['plan_bytes']):.2f} | | | | |")
        continue
    b = base.get((r["T"], r["loss_chunk"] > 0))
    ratio = f"{r['step_ms'] / b:.2f}x" if b else "n/a"
    print(f"| {r['T']} | {loss} | {r['recompute']} | {r['step_ms'] / 1e3:.1f} | {ratio} | {r['tok_per_s']:.0f} | "
          f"{gib(r['peak_mem_bytes']):.2f} | {gib(r['plan_bytes']):.2f} | {r['plan_bytes'] / r['peak_mem_bytes']:.3f} | "
          + (f"{gib(r['process_peak_bytes']):.2f} | {gib(r['process_plan_bytes']):.2f} | "
             f"{r['process_plan_bytes'] / r['process_peak_bytes']:.3f} |" if r.get("process_peak_bytes") else "| | |"))
PY
