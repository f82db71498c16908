#!/usr/bin/env bash
# Context parallelism end to end, under mpirun with 2 ranks: a run trained with parallel.context=2
# resumes with the same N (and refuses another N without checkpoint.elastic); its checkpoint loads
# into a single-rank `horizon eval`; `mpirun -np 2 horizon eval` splits each evaluated sequence
# over the two ranks and writes the same losses and NLL by position as the single-rank evaluation.
#   args: MPIRUN HORIZON SOURCE_DIR
set -euo pipefail
MPIRUN=$1; HZ=$2; SRC=$3; OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi() {
  timeout 300 "$MPIRUN" -np "$1" --oversubscribe --bind-to none --allow-run-as-root --mca pml ob1 \
    --mca btl self,vader --mca btl_vader_single_copy_mechanism none --mca oob_tcp_if_include lo \
    --mca btl_base_warn_component_unused 0 "${@:2}"
}
TINY=(run.out_dir="$OUT" run.name=ctx data.cache_dir="$OUT/data" model.n_layers=2 model.d_model=32 model.n_heads=2
      data.seq_len=64 data.batch_size=2 schedule.warmup_steps=1 eval.every=0 eval.lengths=[64,128,150]
      eval.batches=2 eval.batch_size=2 train.log_every=5 checkpoint.every=6)
RUN="$OUT/ctx"

# 1. train 6 steps split over 2 ranks, then resume to 10 with the same N
mpi 2 "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" train.steps=6 parallel.context=2 > "$OUT/train.log" 2>&1 \
  || fail "context-parallel training: $(tail -5 "$OUT/train.log")"
mpi 2 "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" train.steps=10 parallel.context=2 checkpoint.resume=latest \
  > "$OUT/resume.log" 2>&1 || fail "resume with parallel.context=2: $(tail -5 "$OUT/resume.log")"
grep -q "step 10" "$OUT/resume.log" || grep -q '"step": 10' "$RUN/metrics.jsonl" || fail "the resumed run did not reach step 10"
# 2. another N on the same ranks (2 data-parallel ranks of whole sequences) is refused
set +e
mpi 2 "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" train.steps=12 checkpoint.resume=latest > "$OUT/other.log" 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "resuming a parallel.context=2 checkpoint with parallel.context=1 was accepted"
grep -q "parallel.context=2" "$OUT/other.log" || fail "the refusal does not name parallel.context: $(tail -3 "$OUT/other.log")"
# 2b. the width alone (2 ranks x parallel.context=2 -> 1 rank x 1: one data-parallel replica both times)
#     reads the same data: accepted, and it goes on to step 12
"$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" run.name=ctx_width train.steps=12 \
  checkpoint.resume="$RUN/checkpoints/step_10.h5" > "$OUT/width.log" 2>&1 \
  || fail "resuming a parallel.context=2 checkpoint on one rank (the same replica) was refused: $(tail -3 "$OUT/width.log")"
grep -q '"step": 12' "$OUT/ctx_width/metrics.jsonl" || fail "the width-changed resume did not reach step 12"
# 3. the checkpoint loads into a single-rank evaluation
"$HZ" eval "$RUN" > "$OUT/eval1.log" 2>&1 || fail "single-rank eval of the context-parallel run: $(tail -5 "$OUT/eval1.log")"
cp "$RUN/eval.json" "$OUT/eval1.json"; cp "$RUN/nll_by_position.csv" "$OUT/nll1.csv"
# 4. the same evaluation split over 2 ranks
mpi 2 "$HZ" eval "$RUN" > "$OUT/eval2.log" 2>&1 || fail "mpirun -np 2 horizon eval: $(tail -5 "$OUT/eval2.log")"
grep -q "split over 2 ranks" "$OUT/eval2.log" || fail "the 2-rank evaluation does not say it splits: $(head -3 "$OUT/eval2.log")"
python3 - "$OUT/eval1.json" "$RUN/eval.json" "$OUT/nll1.csv" "$RUN/nll_by_position.csv" <<'PY'
import csv, json, sys
a, b = (json.load(open(p))["lengths"] for p in sys.argv[1:3])
assert [x["length"] for x in a] == [64, 128, 150] == [x["length"] for x in b], (a, b)
for x, y in zip(a, b):
    assert x["tokens"] == y["tokens"], (x, y)
    for k in ("loss", "last256_loss"):  # float32 model: the reduction orders differ, nothing else
        assert abs(x[k] - y[k]) <= 1e-5 * max(1.0, abs(x[k])), (k, x, y)
p, q = ([float(r["nll"]) for r in csv.DictReader(open(f))] for f in sys.argv[3:5])
assert len(p) == len(q) == 150, (len(p), len(q))
worst = max(abs(u - v) for u, v in zip(p, q))
assert worst <= 1e-4, worst
print(f"e2e context: eval split over 2 ranks equals one rank (loss {a[-1]['loss']:.6f}, NLL by position within {worst:.1e})")
PY
