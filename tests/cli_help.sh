#!/usr/bin/env bash
# Every command and subcommand answers --help with its usage and exit code 0, reading nothing
# else (no argument is taken for a recipe, a run or a flag value): tests/cli_help.sh HORIZON
set -u
HZ=$1
fail=0
while IFS= read -r cmd; do
  # shellcheck disable=SC2086  # the command is a word list
  out=$(timeout 60 "$HZ" $cmd --help 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "^usage: horizon ${cmd%% *}" <<< "$out"; then
    echo "FAIL: horizon $cmd --help: exit $rc, first line: $(head -1 <<< "$out")"
    fail=1
  fi
done <<'LIST'
train
eval
data
data prepare
info
generate
sweep
report
simulate
simulate order-awareness
longrope-search
convert
convert hf
convert to-hf
score
tokenize
bench
bench train
bench attention
bench optimizer
bench generate
bench tokenizer
LIST
[ $fail = 0 ] && echo "cli_help: every command answers --help"
exit $fail
