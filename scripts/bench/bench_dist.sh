#!/usr/bin/env bash
# Data parallel on one machine: 1 rank x 2 threads vs 2 ranks x 1 thread on the quickstart model,
# same global batch (8 sequences of 256 tokens), interleaved rounds; prints step time, tokens/s
# and the share of wall time spent in gradient all-reduces.   scripts/bench/bench_dist.sh [steps] [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-30}; ROUNDS=${2:-2}
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader \
  --mca btl_vader_single_copy_mechanism none --mca oob_tcp_if_include lo --mca btl_base_warn_component_unused 0"
COMMON="run.out_dir=$OUT train.steps=$STEPS schedule.warmup_steps=5 eval.every=0 checkpoint.every=0 train.log_every=$STEPS eval.lengths=[256] eval.batches=1"
build/horizon data prepare recipes/quickstart.yaml data.cache_dir=$OUT/data >/dev/null
printf "%-22s %10s %10s %14s\n" config "ms/step" "tok/s" "comm share"
for r in $(seq "$ROUNDS"); do
  OMP_NUM_THREADS=2 build/horizon train recipes/quickstart.yaml $COMMON data.cache_dir=$OUT/data run.name=one_$r > "$OUT/one.log"
  $MPIRUN -np 2 -x OMP_NUM_THREADS=1 build/horizon train recipes/quickstart.yaml $COMMON data.cache_dir=$OUT/data \
    data.batch_size=4 run.name=two_$r > "$OUT/two.log"
  for c in one two; do
    tps=$(grep -o "done: [0-9]* steps, [0-9]* tok/s" "$OUT/$c.log" | awk '{print $4}')
    share=$(grep -o "([0-9.]*%) in gradient" "$OUT/$c.log" | tr -d '()%' | awk '{print $1"%"}' || true)
    name=$([ $c = one ] && echo "1 rank x 2 threads" || echo "2 ranks x 1 thread")
    printf "%-22s %10.1f %10s %14s\n" "$name" "$(awk -v t="$tps" 'BEGIN{print 2048000/t}')" "$tps" "${share:--}"
  done
done
