#!/usr/bin/env bash
# The small extrapolation study of docs/study.md, end to end with Horizon's commands:
#   1. pretraining sweep: RoPE, NoPE, SCOPE, SWAN stack (recipes/study/study.sweep.yaml) -> runs/study/p0*
#      (each point evaluated at 1x-8x with the needle grid and the position probe)
#   2. DroPE recalibration of the RoPE point, evaluated with a fitted temperature c
#   3. the SWAN point re-evaluated with a fitted row-scaling a (per length and per 128-token window)
#   4. one report: runs/study/report/README.md
# Extra arguments are overrides for every run, e.g. a BPE tokenizer:
#   scripts/tools/study.sh data.tokenizer=PATH/tokenizer.json model.vocab_size=N
# Runs use one thread each (run.threads: 1 in the recipes) so the machine stays usable.
set -euo pipefail
cd "$(dirname "$0")/../.."
HZ=${HZ:-build/horizon}
"$HZ" sweep recipes/study/study.sweep.yaml "$@"
"$HZ" train recipes/study/drope_from_rope.yaml "$@"
"$HZ" eval runs/study/drope_from_rope eval.fit_drope_c=[0,0.1,0.2,0.4,0.8] \
  "eval.needle_tasks=[passkey,niah_single_2]" eval.needle_samples=2 eval.needle_format=short \
  "eval.needle_depths=[0,0.5,1]"
swan=$(ls -d runs/study/p03-*)
"$HZ" eval "$swan" eval.fit_swan_a=[16,64,256,1024] \
  "eval.needle_tasks=[passkey,niah_single_2]" eval.needle_samples=2 eval.needle_format=short \
  "eval.needle_depths=[0,0.5,1]"
"$HZ" report runs/study/p0* runs/study/drope_from_rope -o runs/study/report
