#!/usr/bin/env bash
# A rank that fails mid-run must take the whole mpirun job down promptly with a non-zero exit and
# its error message (no hang).  args: MPIRUN HORIZON SOURCE_DIR
set -uo pipefail
MPIRUN=$1; HZ=$2; SRC=$3; OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
start=$(date +%s)
HZ_FAULT_RANK=1 HZ_FAULT_STEP=3 timeout 120 "$MPIRUN" -np 2 --oversubscribe --bind-to none --allow-run-as-root \
  --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
  --mca oob_tcp_if_include lo --mca btl_base_warn_component_unused 0 -x HZ_FAULT_RANK -x HZ_FAULT_STEP \
  "$HZ" train "$SRC/recipes/quickstart.yaml" run.out_dir="$OUT" data.cache_dir="$OUT/data" model.n_layers=1 \
  model.d_model=32 data.seq_len=32 train.steps=50 schedule.warmup_steps=1 eval.every=0 checkpoint.every=0 \
  > "$OUT/log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$OUT/log" | tail -5
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0 although rank 1 failed"; exit 1; fi
if [ "$rc" -eq 124 ]; then echo "FAIL: the job hung (killed by timeout)"; exit 1; fi
grep -q "rank 1 of 2: error: injected fault at step 3" "$OUT/log" || { echo "FAIL: rank 1's error message missing"; exit 1; }
echo "mpi fault: job ended with exit $rc after ${elapsed}s: OK"
