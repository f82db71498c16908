#!/usr/bin/env bash
# Fingerprints of the shipped recipes: each trained 2 steps at a tiny batch, then its logits over the
# first 256 bytes of the Bible (`horizon score --logits`), hashed. Two binaries that print the same
# lines train and compute the same models bit for bit: run it before and after a restructuring.
#   scripts/tools/recipe_fingerprints.sh HORIZON [OUT]     (prints "recipe sha256" lines)
# Runs that start from another (checkpoint.init_from) start from that one's run here.
set -euo pipefail
HZ=$(realpath "$1"); OUT=${2:-$(mktemp -d)}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
common=(run.out_dir="$OUT/runs" data.cache_dir="$OUT/data" train.steps=2 schedule.warmup_steps=0 checkpoint.every=2
        eval.every=0 eval.final=false train.log_every=1 data.batch_size=1 metrics.tensorboard=false)
(set +o pipefail; gzip -dc assets/kjv/kjv.txt.gz | head -c 256) | od -An -v -tu1 | tr -s ' \n' '\n' | sed '/^$/d' > "$OUT/ids"
name_of() { local n; n=$(basename "$1" .yaml); [ "$(dirname "$1")" != recipes ] && n="$(basename "$(dirname "$1")")_$n"; echo "$n"; }
fingerprint() {  # RECIPE
  local r=$1 n extra=()
  n=$(name_of "$r")
  [ -f "$OUT/$n.sha" ] && return 0
  case "$n" in
    drope_recalibrate|drope_partial|swan_continue) fingerprint recipes/pretrain_rope.yaml; extra=(checkpoint.init_from="$OUT/runs/pretrain_rope") ;;
    needle_finetune|passkey_finetune|drope_from_hf|swan_from_hf) fingerprint recipes/quickstart.yaml; extra=(checkpoint.init_from="$OUT/runs/quickstart") ;;
    study_drope_from_rope) fingerprint recipes/study/base.yaml; extra=(checkpoint.init_from="$OUT/runs/study_base") ;;
    study_retrieval_drope|study_retrieval_finetune) fingerprint recipes/study/retrieval_base.yaml; extra=(checkpoint.init_from="$OUT/runs/study_retrieval_base") ;;
    drope_in_run) extra=(train.steps=2 drope.at_step=1 drope.warmup_steps=0) ;;
    bench_gpt2_small) extra=(model.n_layers=2 model.vocab_size=259 data.seq_len=256) ;;
  esac
  case "$n" in drope_from_hf|swan_from_hf) extra+=(swan.window=128) ;; esac
  "$HZ" train "$r" run.name="$n" "${common[@]}" "${extra[@]}" > "$OUT/$n.log" 2>&1 || { echo "$n: training failed ($OUT/$n.log)"; return 0; }
  "$HZ" score "$OUT/runs/$n" "$OUT/ids" --ids --logits "$OUT/$n.logits.safetensors" data.documents=stream > /dev/null 2>&1 ||
    { echo "$n: scoring failed"; return 0; }
  sha256sum < "$OUT/$n.logits.safetensors" | cut -c1-16 > "$OUT/$n.sha"
  echo "$n $(cat "$OUT/$n.sha")"
}
for r in recipes/*.yaml recipes/*/*.yaml; do
  case "$r" in *.sweep.yaml) continue ;; esac
  fingerprint "$r"
done
