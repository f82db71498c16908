#!/usr/bin/env bash
# End-to-end checks of issue 19's run half: every command's usage / --help exits 0 or 2 (never 3),
# the recipe reader refuses wrong section types, duplicate keys and out-of-range numbers with
# file:line, one run per directory (two runs at once: exactly one trains; a killed run's stale
# lock is taken over), resume=latest says what it found, metrics.jsonl keeps one record per step
# across a resume, a checkpoint's architecture cannot be overridden by eval or resume, and an
# evaluation runs beside its run's training but not beside a second evaluation of the same run;
# issue 36's lock, read-only, standard-output and flag cases; inputs that are not regular files.
set -euo pipefail
HZ=$1; SRC=$2; OUT=$(mktemp -d)
pids=()
trap 'set +e; for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done; rm -rf "$OUT"; true' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect RC PATTERN... -- CMD...: runs CMD, checks its exit code and that its output has each pattern
expect() {
  local want=$1; shift; local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done; shift
  set +e; local msg; msg=$("$@" 2>&1); local rc=$?; set -e
  [ "$rc" -eq "$want" ] || fail "exit $rc (want $want): $* -> $msg"
  for p in "${pats[@]}"; do echo "$msg" | grep -F -- "$p" > /dev/null || fail "no '$p' in the output of $*: $msg"; done
}
TINY=(run.out_dir="$OUT" data.cache_dir="$OUT/data" model.n_layers=1 model.d_model=32 data.seq_len=32
      data.batch_size=2 schedule.warmup_steps=1 eval.every=0 eval.lengths=[32] eval.batches=1 train.log_every=5)

# 1. usage and --help: 0 or 2, never an internal error (usage text went through fmt with braces)
for c in train eval data info generate sweep report simulate bench tokenize convert score "bench tokenizer" "bench generate"; do
  set +e; "$HZ" $c --help > "$OUT/help.txt" 2>&1; rc=$?; set -e
  [ "$rc" -eq 0 ] || fail "horizon $c --help exits $rc: $(cat "$OUT/help.txt")"
  grep -q "usage" "$OUT/help.txt" || fail "horizon $c --help prints no usage"
  set +e; "$HZ" $c > "$OUT/noargs.txt" 2>&1 < /dev/null; rc=$?; set -e
  [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ] || fail "horizon $c (no arguments) exits $rc: $(cat "$OUT/noargs.txt")"
done
expect 2 "usage: horizon score" -- "$HZ" score

# 2. the recipe reader
printf 'run: {name: x}\ntrain: -5\n' > "$OUT/type.yaml"
expect 1 "$OUT/type.yaml:2" "train: expected a section" -- "$HZ" train "$OUT/type.yaml"
printf 'optim: [1, 2]\n' > "$OUT/list.yaml"
expect 1 "$OUT/list.yaml:1" "optim: expected a section" -- "$HZ" train "$OUT/list.yaml"
printf 'train:\n  steps: 5\n  steps: 7\n' > "$OUT/dup.yaml"
expect 1 "$OUT/dup.yaml:3: duplicate key 'train.steps' (first at $OUT/dup.yaml:2)" -- "$HZ" train "$OUT/dup.yaml"
printf 'eval: {every: 5, lengths, [256, 512]}\n' > "$OUT/listkey.yaml"
expect 1 "$OUT/listkey.yaml:1" "a key in 'eval' is a list, not a name" -- "$HZ" train "$OUT/listkey.yaml"
printf 'eval:\n  batches: -1\n' > "$OUT/range.yaml"
expect 1 "$OUT/range.yaml:2" "eval.batches: must be >= 1" -- "$HZ" train "$OUT/range.yaml"
expect 1 "checkpoint.every: must be >= 0" -- "$HZ" train "$SRC/recipes/quickstart.yaml" checkpoint.every=-5
expect 1 "train.log_every: must be >= 1" -- "$HZ" train "$SRC/recipes/quickstart.yaml" train.log_every=-1
expect 1 "data.position_reset needs data.documents: masked" -- "$HZ" train "$SRC/recipes/quickstart.yaml" data.position_reset=true
expect 1 "data.documents: masked needs a corpus" -- "$HZ" train "$SRC/recipes/quickstart.yaml" data.documents=masked data.source=passkey
expect 1 "unknown data.documents mode 'packed'" -- "$HZ" train "$SRC/recipes/quickstart.yaml" data.documents=packed
expect 0 "train.log_every (int, default 10, >= 1; run)" "model.n_heads (int, default 4, in [1, 65536]; architecture)" -- "$HZ" train --schema

# 3. resume=latest without a checkpoint says so
expect 0 "resume=latest: no checkpoint in $OUT/fresh/checkpoints, starting from step 0" -- \
  "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" run.name=fresh train.steps=2 checkpoint.resume=latest
test ! -e "$OUT/fresh/.lock" || fail "the lock outlives its run"

# 4. a run killed at step 15 (checkpoint at 10) leaves a stale lock; the resume takes it over,
#    says where it resumes from, and metrics.jsonl keeps one record per step
set +e
HZ_FAULT_RANK=0 HZ_FAULT_STEP=15 HZ_FAULT_SIGNAL=1 "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" run.name=res \
  train.steps=20 checkpoint.every=10 eval.every=5 > "$OUT/killed.txt" 2>&1
rc=$?; set -e
[ "$rc" -eq 137 ] || fail "the killed run exited $rc"
grep -q "\"step\": 15" "$OUT/res/metrics.jsonl" || fail "the killed run logged no step 15"
test -e "$OUT/res/.lock" || fail "a killed run leaves its lock file"
expect 0 "took over the stale lock $OUT/res/.lock" "resume=latest: resuming from $OUT/res/checkpoints/step_10.h5" -- \
  "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" run.name=res train.steps=20 checkpoint.every=10 eval.every=5 \
  checkpoint.resume=latest
dups=$(grep -o '"step": [0-9]*, "loss"' "$OUT/res/metrics.jsonl" | sort | uniq -d)
[ -z "$dups" ] || fail "metrics.jsonl repeats training records: $dups"
dups=$(grep -o '"step": [0-9]*, "eval"' "$OUT/res/metrics.jsonl" | sort | uniq -d)
[ -z "$dups" ] || fail "metrics.jsonl repeats eval records: $dups"
[ "$(grep -c '"loss"' "$OUT/res/metrics.jsonl")" -ge 4 ] || fail "metrics.jsonl lost records"

# 5. a checkpoint's architecture is its own
expect 1 "model.n_heads: 4 -> 8" "recipes/drope_recalibrate.yaml" "recipes/swan_continue.yaml" -- \
  "$HZ" eval "$OUT/res/checkpoints/step_20.h5" model.n_heads=8
expect 1 "checkpoint.resume" "model.layer_kinds.rope.pos: rope -> none" -- \
  "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" run.name=res train.steps=30 checkpoint.resume=latest \
  model.layer_kinds.rope.pos=none
expect 0 "evaluating" -- "$HZ" eval "$OUT/res" model.layer_kinds.rope.rope_scaling=yarn model.layer_kinds.rope.rope_factor=2 \
  eval.lengths=[64]
# the results say what they were evaluated with (horizon report describes the run by it)
grep -q "rope_scaling: yarn" "$OUT/res/eval_recipe.yaml" || fail "eval_recipe.yaml lacks the evaluation's overrides"
grep -q "rope_scaling: yarn" "$OUT/res/config.yaml" && fail "the evaluation's overrides reached the training recipe"

# 6. one run per directory: two at once, exactly one trains, the other exits 1 naming the lock
long=(run.name=twice train.steps=100000 checkpoint.every=0)
"$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" "${long[@]}" > "$OUT/a.txt" 2>&1 & pa=$!; pids+=($pa)
"$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" "${long[@]}" > "$OUT/b.txt" 2>&1 & pb=$!; pids+=($pb)
set +e; wait -n "$pa" "$pb"; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "the first run to end exited $rc: $(cat "$OUT/a.txt" "$OUT/b.txt")"
if kill -0 "$pa" 2>/dev/null; then winner=$pa; loser=b; else winner=$pb; loser=a; fi
kill -0 "$winner" || fail "neither run is training"
grep -F "run directory '$OUT/twice' is in use by another run" "$OUT/$loser.txt" > /dev/null || fail "no lock message: $(cat "$OUT/$loser.txt")"
grep -F "lock file $OUT/twice/.lock" "$OUT/$loser.txt" > /dev/null || fail "the message names no lock file"
grep -F "host pid: $(hostname) $winner" "$OUT/$loser.txt" > /dev/null || fail "the message names no holder: $(cat "$OUT/$loser.txt")"
kill "$winner"; wait "$winner" 2>/dev/null || true

# 7. evaluation: allowed beside a training run (its .lock held), refused beside another evaluation
#    of the same run (both would write eval.json); flock(1) holds the locks as Horizon does
if command -v flock > /dev/null; then
  # -o: only flock itself holds the lock, so killing it releases the lock (its sleep is killed too)
  flock -o "$OUT/res/.lock" sleep 60 & pl=$!; pids+=($pl)
  flock -o "$OUT/res/.eval.lock" sleep 60 & pe=$!; pids+=($pe)
  unlock() { pkill -P "$1" sleep 2>/dev/null || true; kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
  for _ in $(seq 50); do [ -e "$OUT/res/.eval.lock" ] && [ -e "$OUT/res/.lock" ] && break; sleep 0.1; done
  sleep 0.3
  expect 1 "run directory '$OUT/res' is in use by another eval" "lock file $OUT/res/.eval.lock" -- \
    "$HZ" eval "$OUT/res" eval.lengths=[32]
  unlock "$pe"
  rm -f "$OUT/res/eval.json"
  expect 0 "evaluating" -- "$HZ" eval "$OUT/res" eval.lengths=[32]
  test -s "$OUT/res/eval.json" || fail "the evaluation beside a training run wrote no eval.json"
  test ! -e "$OUT/res/.eval.lock" || fail "the eval lock outlives its evaluation"
  ls "$OUT/res"/*.tmp > /dev/null 2>&1 && fail "an evaluation left a .tmp file"
  unlock "$pl"
fi

# 8. issue 36: a lock path is never followed through a planted symlink; a read-only run directory
#    (a published checkpoint) is evaluated without writing; standard output that cannot be written
#    is exit 1, never exit 3 or a silent 0; command-line numbers are parsed whole
echo secret > "$OUT/victim"
rm -f "$OUT/res/.lock" && ln -s "$OUT/victim" "$OUT/res/.lock"
expect 1 "is a symbolic link, which Horizon does not follow" -- \
  "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" run.name=res train.steps=25 checkpoint.resume=latest
[ "$(cat "$OUT/victim")" = secret ] || fail "the planted lock symlink's target was overwritten"
rm "$OUT/res/.lock"
# root writes anywhere: the read-only case runs as nobody when the test runs as root
as_reader() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi; }
chmod 755 "$OUT"
chmod -R a-w "$OUT/res"
before=$(md5sum "$OUT/res/eval.json" 2>/dev/null || true)
expect 0 "is read-only: the results above were not written" -- as_reader "$HZ" eval "$OUT/res" eval.lengths=[32]
chmod -R u+w "$OUT/res"
[ "$(md5sum "$OUT/res/eval.json" 2>/dev/null || true)" = "$before" ] || fail "the read-only evaluation changed eval.json"
for c in "train --schema" "info $SRC/recipes/quickstart.yaml" "tokenize --info byte" "tokenize byte $OUT/victim" \
         "score $OUT/res $OUT/victim" "generate $OUT/res --prompt hi --max-new-tokens 2"; do
  expect 1 "cannot write to standard output" -- sh -c "'$HZ' $c > /dev/full"
done
expect 1 "--max-new-tokens: expected a whole number, got '1e3'" -- "$HZ" generate "$OUT/res" --prompt hi --max-new-tokens 1e3
expect 1 "--seed: expected a whole number" -- "$HZ" generate "$OUT/res" --prompt hi --seed 99999999999999999999
expect 1 "--temperature must be a finite number" -- "$HZ" generate "$OUT/res" --prompt hi --temperature inf
expect 1 "--seed must be in [0, " -- "$HZ" generate "$OUT/res" --prompt hi --seed -1
# a prompt whose prefill and cache could not fit: refused before the forward pass (200 MB of text:
# hundreds of GiB at this model's size on any machine)
head -c 200000000 /dev/zero | tr '\0' 'a' > "$OUT/big_prompt.txt"
expect 1 "generate: a prompt of 200000000 tokens" "shorten the prompt" -- "$HZ" generate "$OUT/res" --file "$OUT/big_prompt.txt"
rm -f "$OUT/big_prompt.txt"
# a run that evaluates needs one validation batch at its length: refused before training
expect 1 "eval.batch_size 100000 x data.seq_len 32" "eval.final=false" -- \
  "$HZ" train "$SRC/recipes/quickstart.yaml" "${TINY[@]}" run.name=noval eval.batch_size=100000
expect 1 "'/dev/zero' is a character device, not a regular file" -- "$HZ" generate "$OUT/res" --file /dev/zero
# a FIFO in place of an input: refused at once naming it (it kept the command waiting for a writer)
mkfifo "$OUT/fifo.yaml" "$OUT/step_1.h5" "$OUT/tokenizer.json"
expect 1 "$OUT/fifo.yaml" "is a FIFO" -- timeout 60 "$HZ" train "$OUT/fifo.yaml"
expect 1 "$OUT/step_1.h5" "is a FIFO" -- timeout 60 "$HZ" eval "$OUT/step_1.h5"
expect 1 "$OUT/tokenizer.json" "is a FIFO" -- timeout 60 "$HZ" tokenize "$OUT/tokenizer.json" /dev/null
expect 1 "cannot create the run directory '/proc/x'" -- "$HZ" train "$SRC/recipes/quickstart.yaml" run.out_dir=/proc run.name=x
echo "e2e_runs: ok"
