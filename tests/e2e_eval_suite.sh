#!/usr/bin/env bash
# End-to-end CLI test of the evaluation suite: progress lines reach a redirected stdout while
# training runs (line buffering), generate (text and --json), eval with needles / probe / SWAN
# fit and retrieval heads over every kept checkpoint, simulate, sweep (interrupted by a killed process, then
# resumed), and report.
set -euo pipefail
# (grep without -q: it reads its whole input, so a writer never dies of SIGPIPE under pipefail)
HZ=$1; SRC=$2; OUT=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$OUT"' EXIT
TINY=(run.out_dir="$OUT" data.cache_dir="$OUT/data" model.n_layers=2 model.d_model=64 data.seq_len=64
      schedule.warmup_steps=5 eval.every=0 eval.lengths=[64,128] train.log_every=5)

# 1. progress lines appear in a redirected stdout while the run is still going
"$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" run.name=long train.steps=100000 checkpoint.every=0 \
  > "$OUT/stdout.txt" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "step .*10/100000" "$OUT/long/train.log" 2>/dev/null && break; sleep 0.1; done
kill -0 "$pid"                                      # still training
grep -q "step .*10/100000" "$OUT/stdout.txt"         # ... and the line is already in the file
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

# 2. a short run, generate, eval with the new options
"$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" train.steps=20 checkpoint.every=10 > /dev/null
R="$OUT/quickstart"
txt=$("$HZ" generate "$R" --prompt "In the beginning" --max-new-tokens 12)
test "${#txt}" -ge 1
"$HZ" generate "$R" --prompt "In the beginning" --max-new-tokens 8 --temperature 0.9 --top-p 0.9 --seed 4 --json > "$OUT/g1.json"
"$HZ" generate "$R" --prompt "In the beginning" --max-new-tokens 8 --temperature 0.9 --top-p 0.9 --seed 4 --json > "$OUT/g2.json"
grep -q '"kv_bytes":' "$OUT/g1.json"
test "$(grep -o '"tokens":\[[0-9,]*\]' "$OUT/g1.json")" = "$(grep -o '"tokens":\[[0-9,]*\]' "$OUT/g2.json")"
set +e
msg=$("$HZ" generate "$R" --prompt x eval.swan_a=100 2>&1); rc=$?
set -e
test "$rc" -eq 1 && echo "$msg" | grep "no global NoPE layer" >/dev/null
"$HZ" eval "$R" eval.batches=1 eval.needle_tasks=[passkey] eval.needle_samples=1 eval.needle_depths=[0.5] \
  eval.needle_format=short eval.probe_sequences=2 > /dev/null
test -s "$R/needles.csv" && test -s "$R/needles.json" && test -s "$R/probes.csv"
# retrieval heads of every kept checkpoint (steps 10 and 20), one file over the steps; an evaluation
# replaces the previous one's results whole, so the probe is asked again for the report below (without
# it, probes.csv goes)
"$HZ" eval "$R" --all-checkpoints eval.batches=1 eval.lengths=[128] eval.needle_tasks=[passkey] eval.needle_samples=1 \
  eval.needle_depths=[0.5] eval.needle_format=short eval.retrieval_heads=true eval.probe_sequences=2 > "$OUT/rh.txt"
grep "^retrieval heads" "$OUT/rh.txt" > /dev/null
test "$(head -1 "$R/retrieval_heads.csv")" = "step,task,length,layer,layer_kind,head,window,score,needle_mass,opportunities"
test "$(grep -c '^10,passkey,128,' "$R/retrieval_heads.csv")" -eq 8 && test "$(grep -c '^20,passkey,128,' "$R/retrieval_heads.csv")" -eq 8
set +e
msg=$("$HZ" eval "$R" eval.retrieval_heads=true 2>&1); rc=$?
set -e
test "$rc" -eq 1 && echo "$msg" | grep "eval.needle_tasks" >/dev/null
set +e
msg=$("$HZ" eval "$R/checkpoints/step_20.h5" --all-checkpoints 2>&1); rc=$?
set -e
test "$rc" -eq 1 && echo "$msg" | grep "is not a run directory" >/dev/null
"$HZ" simulate order-awareness --T 64 --heads 6 --layers 4 --trials 1 -o "$OUT/oa.csv" > "$OUT/oa.txt"
grep -q "^scope" "$OUT/oa.txt"
test "$(wc -l < "$OUT/oa.csv")" -eq 17

# 3. a sweep whose second point is killed mid-way, then resumed
cat > "$OUT/grid.yaml" <<YAML
recipe: $SRC/recipes/quickstart.yaml
name: grid
out_dir: $OUT
overrides:
  - data.cache_dir=$OUT/data
  - model.n_layers=1
  - model.d_model=32
  - data.seq_len=32
  - train.steps=6
  - checkpoint.every=2
  - schedule.warmup_steps=1
  - eval.every=0
  - "eval.lengths=[32]"
  - eval.batches=1
grid:
  optim.lr: [0.001, 0.003]
YAML
set +e
HZ_FAULT_RANK=0 HZ_FAULT_STEP=3 "$HZ" sweep "$OUT/grid.yaml" --quiet > /dev/null 2>&1; rc=$?
set -e
test "$rc" -ne 0                                     # the injected fault killed the first point at step 3
"$HZ" sweep "$OUT/grid.yaml" --quiet > "$OUT/sweep.txt"
grep -q "| p01-0.003 | 0.003 |" "$OUT/sweep.txt"
grep -q "resumed from .*step_2.h5 at step 2" "$OUT/grid/p00-0.001/train.log"
test -s "$OUT/grid/sweep.csv"

# 4. the report
"$HZ" report "$R" "$OUT/grid/p00-0.001" -o "$OUT/report" > /dev/null
grep "^| quickstart | 10 |" "$OUT/report/README.md" > /dev/null && grep "^| quickstart | 20 |" "$OUT/report/README.md" > /dev/null
for f in README.md report.json loss_vs_length.png needles_quickstart.png probe_r2.png order_awareness.png; do
  test -s "$OUT/report/$f"
done
echo "e2e eval suite: OK"
