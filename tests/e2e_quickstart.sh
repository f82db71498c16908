#!/usr/bin/env bash
# End-to-end CLI test: the quickstart recipe at reduced size, then eval, then a bad recipe.
set -euo pipefail
# (grep without -q: it reads its whole input, so a writer never dies of SIGPIPE under pipefail)
HZ=$1; SRC=$2; OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$HZ" train "$SRC/recipes/quickstart.yaml" run.out_dir="$OUT" data.cache_dir="$OUT/data" \
  model.n_layers=2 model.d_model=64 data.seq_len=64 train.steps=30 schedule.warmup_steps=5 \
  checkpoint.every=15 eval.every=15 eval.lengths=[64,128,256] train.log_every=10
test -f "$OUT/quickstart/config.yaml"
test -f "$OUT/quickstart/checkpoints/step_30.h5"
grep -q '"step": 30' "$OUT/quickstart/metrics.jsonl"
"$HZ" eval "$OUT/quickstart" eval.lengths=[64,256] eval.fit_drope_c=[0,0.5] eval.batches=2 eval.passkey_examples=1
test -f "$OUT/quickstart/eval.csv"
test "$(wc -l < "$OUT/quickstart/passkey.csv")" -eq 6   # length 64 cannot hold the needle
test "$(wc -l < "$OUT/quickstart/nll_by_position.csv")" -eq 257
"$HZ" info "$OUT/quickstart" | grep "attention cost" >/dev/null
printf 'model:\n  n_layres: 2\n' > "$OUT/bad.yaml"
set +e
msg=$("$HZ" train "$OUT/bad.yaml" 2>&1); rc=$?
set -e
test "$rc" -eq 1
echo "$msg" | grep "bad.yaml:2: unknown key 'model.n_layres'" >/dev/null
echo "e2e quickstart: OK"
