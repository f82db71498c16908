#!/usr/bin/env bash
# Export check with transformers (needs the venv, so it is a script, not a CTest): every fixture of
# tests/fixtures/hf is imported (horizon convert hf), scored by Horizon (horizon score --ids --json),
# exported (horizon convert to-hf), and transformers must reproduce Horizon's per-token NLL on the
# exported directory to 1e-5; then the same for Horizon-native models of every exportable layer
# pattern (below).
#   HZ_VENV=/work/venv scripts/tools/hf_roundtrip_check.sh [build/horizon]
set -euo pipefail
cd "$(dirname "$0")/../.."
HZ=$(realpath "${1:-build/horizon}")
PY=$(scripts/tools/venv.sh)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
fail=0
for d in tests/fixtures/hf/*/; do
  name=$(basename "$d")
  "$PY" -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$d/expected_logprobs.json" > "$OUT/$name.ids"
  "$HZ" convert hf "$d" "$OUT/$name.h5" > /dev/null
  "$HZ" score "$OUT/$name.h5" "$OUT/$name.ids" --ids --json > "$OUT/$name.json"
  "$HZ" score "$OUT/$name.h5" "$OUT/$name.ids" --ids --json --f64 > "$OUT/$name.64.json"
  "$HZ" convert to-hf "$OUT/$name.h5" "$OUT/$name" > /dev/null
  printf '%-16s ' "$name"
  "$PY" scripts/tools/hf_check_export.py "$OUT/$name" --ids "$OUT/$name.ids" --horizon "$OUT/$name.json" \
    --horizon64 "$OUT/$name.64.json" 2>/dev/null || fail=1
done

# Horizon-native models (random weights, init_std 0.3 so positions matter): each layer pattern
# exports to the architecture that expresses it; transformers must reproduce Horizon on text
# tokenized by the exported tokenizer.json (Horizon's byte tokenizer), and importing the export
# back must give the same scores bit for bit.
printf 'In the beginning God created the heaven and the earth. Caf\xc3\xa9 \xe2\x82\xac 42 -- "quoted"\n%.0s' 1 2 > "$OUT/text.txt"
base="run.out_dir=$OUT/runs data.cache_dir=$OUT/data data.seq_len=64 data.batch_size=2 train.steps=1
  schedule.warmup_steps=0 optim.lr=1e-9 eval.every=0 eval.batches=1 eval.lengths=[64] checkpoint.every=0
  model.d_model=32 model.n_heads=4 model.init_std=0.3 train.log_every=1"
K='model.layer_kinds'
native() {  # name, then recipe overrides
  local name=$1; shift
  # shellcheck disable=SC2086
  "$HZ" train recipes/quickstart.yaml run.name="$name" $base "$@" > /dev/null
  "$HZ" score "$OUT/runs/$name" "$OUT/text.txt" --json > "$OUT/$name.json"
  "$HZ" score "$OUT/runs/$name" "$OUT/text.txt" --json --f64 > "$OUT/$name.64.json"
  "$HZ" convert to-hf "$OUT/runs/$name" "$OUT/$name.hf" | head -1 | sed 's/^/  /'
  printf '%-16s ' "$name"
  "$PY" scripts/tools/hf_check_export.py "$OUT/$name.hf" --text "$OUT/text.txt" --horizon "$OUT/$name.json" \
    --horizon64 "$OUT/$name.64.json" 2>/dev/null || fail=1
  "$HZ" score "$OUT/$name.hf" "$OUT/text.txt" --json > "$OUT/$name.back.json"
  cmp -s "$OUT/$name.json" "$OUT/$name.back.json" || { echo "  re-import scores differ"; fail=1; }
}
native swan "$K={g: {pos: none}, s: {pos: rope, mask: window, window: 16}}" model.pattern=[g,s,s,s] model.n_layers=4
native drope_nope drope.at_step=0 train.steps=2 model.n_layers=2
native qwen_window "$K={w: {pos: rope, rope_base: 500, mask: window, window: 24}}" model.pattern=[w] model.qkv_bias=true model.n_kv_heads=2
native mixed_window "$K={r: {pos: rope}, w: {pos: rope, mask: window, window: 8}}" model.pattern=[r,w] model.tie_embeddings=false model.head_dim=16
native bias_nope "$K={r: {pos: rope}, n: {pos: none}}" model.pattern=[r,n] model.qkv_bias=true
native ntk "$K={r: {pos: rope, rope_scaling: ntk, rope_factor: 3}}" model.pattern=[r]
native pi "$K={r: {pos: rope, rope_scaling: pi, rope_factor: 2}}" model.pattern=[r]
native dynamic "$K={r: {pos: rope, rope_scaling: dynamic_ntk, rope_factor: 2, rope_original_context: 32}}" model.pattern=[r]
native yarn_index "$K={r: {pos: rope, rope_base: 500, rope_scaling: yarn, rope_factor: 4, rope_original_context: 64, yarn_ramp: index}}" model.pattern=[r]
native llama3 "$K={r: {pos: rope, rope_base: 500, rope_scaling: llama3, rope_factor: 4, rope_original_context: 64}}" model.pattern=[r]
exit $fail
