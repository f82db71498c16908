#!/usr/bin/env bash
# Every shipped recipe leaves as a transformers model that computes what Horizon computes.
#   tests/e2e_hf_export.sh HORIZON SRC [PART]   PART: remote | recipes | inference | lm_eval | all (default)
# CTest runs the parts as entries of their own (e2e_hf_*), side by side with the C++ suites.
#   remote     tests/hf/remote_code_test.py checks modeling_horizon.py on its own (every ingredient against
#              a brute-force float64 formula, the cache, padding, packing), tests/hf/attention_paths_test.py
#              its sdpa and flex_attention paths and gradient checkpointing against eager, and tests/hf/oracle_test.py its
#              masks and row factors against attention's oracle table (tests/fixtures/attention_oracle.json,
#              which the C++ suite holds tiling.h to); no Horizon run
#   recipes    for each recipe under recipes/: one training step at the recipe's shape (batch 1, init_std
#              0.05, lr 1e-4; the benchmark's GPT-2 with 2 layers, the byte vocabulary and T 256; runs
#              that start from a checkpoint start from the ones trained here), then `horizon convert
#              to-hf` (a stock architecture where one expresses the model, else HorizonForCausalLM with
#              its code). Every recipe is exported; the exports are then grouped by their layer
#              signature (tests/hf/signature.py: the architecture and which ingredients each layer kind
#              sets, not their sizes), and the first recipe of each group is held to Horizon: its own
#              logits (`horizon score --logits`) at the training length T and at 4T in float32, at T in
#              float64, and a greedy continuation (`horizon generate`), which
#              tests/hf/compare_exports.py checks through transformers (trust_remote_code): logits,
#              generate() with the cache, a left-padded batch and packed position_ids.
#              HZ_HF_EXPORT_ALL=1 holds every recipe to Horizon, not one per signature. Beside the recipes,
#              one export of the learned RoPE angles (retrieval_base.yaml's acc_rope_v, grape_m, acc_rope
#              per KV head with learned_freqs layer) is held to Horizon the same way.
#   inference  inference-time options (`horizon score eval.X=...` against the export with the same edit
#              in its config.json): YaRN, dynamic NTK, LongRoPE, LaMPE, DroPE's c, SWAN's a; and the
#              Hub's layout: sharded exports (--max-shard-size) loaded offline against the single file,
#              with their index, tokenizer, generation_config.json and model card (compare_exports.py --sharded)
#   lm_eval    tests/hf/lm_eval_check.py runs lm-eval-harness on the FoX export with local tasks and
#              compares every request with `horizon score` / `horizon generate`, and the needle grid
#              `horizon eval --export-lm-eval` writes with `horizon eval`'s answers, example by example
# Needs PyTorch, transformers and lm-eval (HZ_TEST_PYTHON, made by scripts/test.sh): exit 77 (skipped)
# without them, a failure with HZ_REQUIRE_PYPI=1.
set -euo pipefail
HZ=$1; SRC=$2; PART=${3:-all}; OUT=$(mktemp -d)
case "$PART" in remote|recipes|inference|lm_eval|all) ;; *) echo "unknown part: $PART"; exit 2 ;; esac
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }
[ -n "${HZ_KEEP:-}" ] || trap 'rm -rf "$OUT"' EXIT  # HZ_KEEP=1 keeps the exports (printed)
[ -z "${HZ_KEEP:-}" ] || echo "exports in $OUT"
PY=${HZ_TEST_PYTHON:-python3}
if ! "$PY" -c 'import torch, transformers, safetensors' 2> /dev/null; then
  if [ "${HZ_REQUIRE_PYPI:-0}" = "1" ]; then echo "HZ_TEST_PYTHON=$PY lacks torch/transformers/safetensors"; exit 1; fi
  echo "skipped: no Python with torch, transformers and safetensors (HZ_TEST_PYTHON)"; exit 77
fi
# the remote code on its own: brute-force formulas, the cache, padding, packing (tiny random models), its
# attention paths against eager; its masks and row factors against the oracle table that tiling.h is held to
if want remote; then
  "$PY" "$SRC/tests/hf/remote_code_test.py"
  "$PY" "$SRC/tests/hf/attention_paths_test.py"
  "$PY" "$SRC/tests/hf/oracle_test.py"
  [ "$PART" = all ] || { echo "e2e hf export: the remote code OK"; exit 0; }
fi
cd "$SRC"  # recipes name their tokenizer files relative to the repository
# init_std 0.05 (2.5x the default) and one step at lr 1e-4: the outputs still vary from token to
# token, so most greedy continuations compared are not one repeated byte (init 0.1 and more make the
# float32 logits of transformers' own stock classes drift past 1e-5 from their float64 ones)
common=(run.out_dir="$OUT/runs" data.cache_dir="$OUT/data" train.steps=1 schedule.warmup_steps=0 checkpoint.every=1
        model.init_std="${HZ_INIT_STD:-0.05}" optim.lr="${HZ_LR:-1e-4}"
        eval.every=0 eval.final=false train.log_every=1 data.batch_size=1 metrics.tensorboard=false)
# runs first that others start from (checkpoint.init_from), then every other recipe
order=(recipes/pretrain_rope.yaml recipes/quickstart.yaml)
for r in recipes/*.yaml recipes/*/*.yaml; do
  case "$r" in *.sweep.yaml|recipes/pretrain_rope.yaml|recipes/quickstart.yaml) continue ;; esac
  order+=("$r")
done
manifest="$OUT/manifest.txt"; : > "$manifest"
gzip -dc assets/kjv/kjv.txt.gz > "$OUT/kjv.txt"
name_of() {  # recipes/x.yaml -> x, recipes/dir/x.yaml -> dir_x
  local n; n=$(basename "$1" .yaml)
  [ "$(dirname "$1")" != recipes ] && n="$(basename "$(dirname "$1")")_$n"
  echo "$n"
}
export_recipe() {  # RECIPE [NAME OVERRIDES...]: one training step, then the export in $OUT/hf/NAME (once)
  local r=$1 n extra=() run
  n=${2:-$(name_of "$r")}
  [ $# -le 2 ] || extra=("${@:3}")
  [ -d "$OUT/hf/$n" ] && return 0
  case "$n" in  # runs that start from another: it first
    drope_recalibrate|drope_partial|swan_continue)
      export_recipe recipes/pretrain_rope.yaml; extra=(checkpoint.init_from="$OUT/runs/pretrain_rope") ;;
    needle_finetune|passkey_finetune)
      export_recipe recipes/quickstart.yaml; extra=(checkpoint.init_from="$OUT/runs/quickstart") ;;
    drope_from_hf|swan_from_hf)
      export_recipe recipes/quickstart.yaml; extra=(checkpoint.init_from="$OUT/hf/quickstart" swan.window=128) ;;
    study_drope_from_rope)
      export_recipe recipes/study/base.yaml; extra=(checkpoint.init_from="$OUT/runs/study_base") ;;
    study_retrieval_drope|study_retrieval_finetune)
      export_recipe recipes/study/retrieval_base.yaml; extra=(checkpoint.init_from="$OUT/runs/study_retrieval_base") ;;
    drope_in_run) extra=(train.steps=2 drope.at_step=1 drope.warmup_steps=0) ;;
    bench_gpt2_small) extra=(model.n_layers=2 model.vocab_size=259 data.seq_len=256) ;;
  esac
  "$HZ" train "$r" run.name="$n" "${common[@]}" "${extra[@]}" > "$OUT/$n.train.log" 2>&1 ||
    { echo "training $r failed:"; tail -5 "$OUT/$n.train.log"; exit 1; }
  run="$OUT/runs/$n"
  "$HZ" convert to-hf "$run" "$OUT/hf/$n" > "$OUT/$n.convert.txt"
  # token ids below 256 (valid for every tokenizer here): the Bible's bytes, T and 4T of them
  local T; T=$(sed -n 's/^  seq_len: \([0-9]*\)$/\1/p' "$run/config.yaml")
  head -c $((4 * T)) "$OUT/kjv.txt" | od -An -v -tu1 | tr -s ' \n' '\n' | sed '/^$/d' > "$OUT/$n.ids4"
  head -n "$T" "$OUT/$n.ids4" > "$OUT/$n.ids1"
}
hold_to_horizon() {  # NAME: Horizon's logits and continuation beside the export, for compare_exports.py
  local n=$1 run="$OUT/runs/$1" d="$OUT/hf/$1" arch prompt
  arch=$(sed -n 's/^exported .* as \(.*\)$/\1/p' "$OUT/$n.convert.txt")
  "$HZ" score "$run" "$OUT/$n.ids1" --ids --logits "$d/horizon_T.safetensors" data.documents=stream > /dev/null
  "$HZ" score "$run" "$OUT/$n.ids4" --ids --logits "$d/horizon_4T.safetensors" data.documents=stream > /dev/null
  "$HZ" score "$run" "$OUT/$n.ids1" --ids --f64 --logits "$d/horizon_T_f64.safetensors" data.documents=stream > /dev/null
  # (a prefix-LM takes its whole prefix in the prompt: two verses)
  prompt="And God said, Let there be light"
  grep -q "prefix: [1-9]" "$run/config.yaml" && prompt="In the beginning God created the heaven and the earth. And the earth was without form, and void."
  "$HZ" generate "$run" --prompt "$prompt" --max-new-tokens 12 --json --documents stream \
    > "$d/horizon_generate.json"
  cp "$OUT/$n.ids1" "$d/ids_T.txt"; cp "$OUT/$n.ids4" "$d/ids_4T.txt"
  echo "$n $arch $d" >> "$manifest"
}
if want recipes; then
  declare -A first  # layer signature -> the first recipe that has it
  skipped=0
  for r in "${order[@]}"; do
    n=$(name_of "$r")
    # HZ_RECIPES=REGEX: only those (and the runs others start from), while working on the export
    if [ -n "${HZ_RECIPES:-}" ] && ! [[ "$n" =~ $HZ_RECIPES ]]; then continue; fi
    export_recipe "$r"
    sig=$("$PY" "$SRC/tests/hf/signature.py" "$OUT/hf/$n")
    if [ -n "${first[$sig]:-}" ] && [ "${HZ_HF_EXPORT_ALL:-0}" != 1 ]; then
      echo "$n: exported; the layer signature of ${first[$sig]}, held to Horizon there"
      skipped=$((skipped + 1))
      continue
    fi
    first[$sig]=${first[$sig]:-$n}
    hold_to_horizon "$n"
  done
  # issue 58's learned angles, on the retrieval study's shape with its kinds (an export beside the recipes'):
  # accumulated angles with V rotated, GRAPE-M per KV head, accumulated per KV head with GRAPE-M per layer
  if [ -z "${HZ_RECIPES:-}" ] || [[ learned_angles =~ $HZ_RECIPES ]]; then
    export_recipe recipes/study/retrieval_base.yaml learned_angles "model.pattern=[acc_rope_v,grape_m,acc_rope,rope]" data.seq_len=128 \
      model.layer_kinds.acc_rope.angles_per_head=true model.layer_kinds.acc_rope.learned_freqs=layer
    hold_to_horizon learned_angles
  fi
  "$PY" "$SRC/tests/hf/compare_exports.py" "$manifest"
  echo "e2e hf export: $(( $(wc -l < "$manifest") + skipped )) recipes exported, $(wc -l < "$manifest") held to" \
       "Horizon (one per layer signature; HZ_HF_EXPORT_ALL=1: every one; and the learned angles' export)"
fi
# inference-time options: `horizon score eval.X=...` at 4T against the export with the same edit in
# its config.json (HorizonForCausalLM exports: --remote-code where a stock class would be written)
inference_case() {  # run option value overrides...
  local n=$1 opt=$2 val=$3; shift 3
  local d="$OUT/hf/${n}_remote" T
  [ -d "$d" ] || "$HZ" convert to-hf "$OUT/runs/$n" "$d" --remote-code > /dev/null
  T=$(sed -n 's/^  seq_len: \([0-9]*\)$/\1/p' "$OUT/runs/$n/config.yaml")
  local logits; logits="$OUT/inference_$(wc -l < "$OUT/inference_cases.txt").safetensors"
  "$HZ" score "$OUT/runs/$n" "$OUT/$n.ids4" --ids --logits "$logits" "$@" > /dev/null
  echo "$d $OUT/$n.ids4 $logits $opt $val $T" >> "$OUT/inference_cases.txt"
}
if [ -n "${HZ_RECIPES:-}" ]; then
  echo "e2e hf export: OK (HZ_RECIPES=$HZ_RECIPES: inference options and lm-eval skipped)"; exit 0
fi
if want inference; then
  : > "$OUT/inference_cases.txt"
  export_recipe recipes/pretrain_rope.yaml
  export_recipe recipes/drope_recalibrate.yaml
  export_recipe recipes/pretrain_swan.yaml
  inference_case pretrain_rope rope_scaling yarn eval.rope_scaling=yarn
  inference_case pretrain_rope rope_scaling dynamic_ntk eval.rope_scaling=dynamic_ntk
  # LongRoPE's searched factors from a file (16 pairs: head_dim 32), long ones past T
  "$PY" -c 'import json, sys; json.dump({"long_factor": [1 + 0.4 * m for m in range(16)],
    "short_factor": [1 + 0.02 * m for m in range(16)]}, open(sys.argv[1], "w"))' "$OUT/longrope.json"
  inference_case pretrain_rope longrope "$OUT/longrope.json" eval.rope_scaling=longrope \
    eval.longrope_long_factors="$OUT/longrope.json" eval.longrope_short_factors="$OUT/longrope.json"
  inference_case pretrain_rope lampe 64,16 eval.lampe=true eval.lampe_local=64 eval.lampe_sink=16
  inference_case drope_recalibrate drope_c 0.4 eval.drope_c=0.4
  inference_case pretrain_swan swan_a 362 eval.swan_a=362
  "$PY" "$SRC/tests/hf/compare_inference.py" --cases "$OUT/inference_cases.txt"  # one process: torch imported once
  echo "e2e hf export: inference-time options OK"
  # the Hub's layout: the same runs exported in shards of 4 MB (a stock and a HorizonForCausalLM one),
  # loaded offline from a copy of the folder alone, against the single-file exports
  : > "$OUT/hub_cases.txt"
  for n in pretrain_rope drope_recalibrate; do
    "$HZ" convert to-hf "$OUT/runs/$n" "$OUT/hf/${n}_sharded" --max-shard-size 4MB > /dev/null
    echo "$OUT/hf/$n $OUT/hf/${n}_sharded 4000000 $OUT/$n.ids1" >> "$OUT/hub_cases.txt"
  done
  # (stdin closed: a trust_remote_code question transformers would ask fails instead of waiting)
  HF_HUB_OFFLINE=1 "$PY" "$SRC/tests/hf/compare_exports.py" --sharded "$OUT/hub_cases.txt" < /dev/null
  echo "e2e hf export: sharded exports OK"
fi
# lm-eval-harness on one export (FoX: HorizonForCausalLM), offline, against horizon score / generate
if want lm_eval; then
  if "$PY" -c 'import lm_eval' 2> /dev/null || [ "${HZ_REQUIRE_PYPI:-0}" = "1" ]; then
    export_recipe recipes/pretrain_fox.yaml
    mkdir -p "$OUT/lm_eval"
    "$PY" "$SRC/tests/hf/lm_eval_check.py" "$HZ" "$OUT/runs/pretrain_fox" "$OUT/hf/pretrain_fox" "$OUT/lm_eval"
  else
    echo "lm-eval check skipped: no lm_eval in $PY"
  fi
fi
echo "e2e hf export ($PART): OK"
