#!/usr/bin/env bash
# A rank that fails mid-run (an exception, or death by SIGKILL) must take the whole mpirun job
# down promptly with a non-zero exit (no hang), and an exception's message must be printed: for
# data parallel ranks and for the two ranks of one context-parallel group (parallel.context=2,
# where the survivor waits inside a layer's exchange).
#   args: MPIRUN HORIZON SOURCE_DIR
set -uo pipefail
MPIRUN=$1; HZ=$2; SRC=$3; OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() {  # $1 = HZ_FAULT_SIGNAL value, $2 = parallel.context
  HZ_FAULT_RANK=1 HZ_FAULT_STEP=3 HZ_FAULT_SIGNAL=$1 timeout 120 "$MPIRUN" -np 2 --oversubscribe --bind-to none \
    --allow-run-as-root --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
    --mca oob_tcp_if_include lo --mca btl_base_warn_component_unused 0 \
    -x HZ_FAULT_RANK -x HZ_FAULT_STEP -x HZ_FAULT_SIGNAL \
    "$HZ" train "$SRC/recipes/quickstart.yaml" run.out_dir="$OUT" data.cache_dir="$OUT/data" model.n_layers=1 \
    model.d_model=32 data.seq_len=32 train.steps=50 schedule.warmup_steps=1 eval.every=0 checkpoint.every=0 parallel.context=$2 \
    > "$OUT/log" 2>&1
}
for ctx in 1 2; do
for sig in 0 1; do
  start=$(date +%s)
  run $sig $ctx; rc=$?
  elapsed=$(( $(date +%s) - start ))
  tail -3 "$OUT/log"
  if [ "$rc" -eq 0 ]; then echo "FAIL (signal=$sig, context=$ctx): the job exited 0 although rank 1 failed"; exit 1; fi
  if [ "$rc" -eq 124 ]; then echo "FAIL (signal=$sig, context=$ctx): the job hung (killed by timeout)"; exit 1; fi
  if [ "$sig" = 0 ]; then
    grep -q "rank 1 of 2: error: injected fault at step 3" "$OUT/log" || { echo "FAIL: rank 1's error message missing"; exit 1; }
  fi
  echo "mpi fault (signal=$sig, context=$ctx): job ended with exit $rc after ${elapsed}s: OK"
done
done
