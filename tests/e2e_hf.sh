#!/usr/bin/env bash
# End-to-end CLI test of Hugging Face checkpoints: import (convert hf), score, DroPE and SWAN
# recipes starting from an imported model at reduced size, export (convert to-hf: stock, or
# HorizonForCausalLM for DroPE's QK-norm) and re-import, and the refusals (QK-norm with --stock, a
# truncated safetensors file, an unknown config field).
# The fixture is a tiny LlamaForCausalLM written by transformers (scripts/fixtures/make_hf_fixtures.py).
set -euo pipefail
# (grep without -q: it reads its whole input, so a writer never dies of SIGPIPE under pipefail)
HZ=$1; SRC=$2; OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
FIX=$SRC/tests/fixtures/hf
printf 'And God said, Let there be light: and there was light.\n' > "$OUT/text.txt"
fails() {  # expected exit code 1 and a message
  local want=$1; shift
  set +e; msg=$("$@" 2>&1); rc=$?; set -e
  if [ "$rc" -ne 1 ] || ! grep -q -- "$want" <<< "$msg"; then echo "expected exit 1 with '$want', got $rc: $msg"; exit 1; fi
}

# import: every config field accounted for; the checkpoint scores exactly like the directory
"$HZ" convert hf "$FIX/llama" "$OUT/llama.h5" > "$OUT/convert.txt"
grep -q "num_key_value_heads .*-> model.n_kv_heads" "$OUT/convert.txt"
grep -q "tie_word_embeddings .*true" "$OUT/convert.txt"
"$HZ" score "$FIX/llama" "$OUT/text.txt" --json data.tokenizer=byte > "$OUT/a.json"
"$HZ" score "$OUT/llama.h5" "$OUT/text.txt" --json data.tokenizer=byte > "$OUT/b.json"
cmp "$OUT/a.json" "$OUT/b.json"
grep -q '"tokens":55' "$OUT/a.json"
"$HZ" score "$OUT/llama.h5" "$OUT/text.txt" --bos data.tokenizer=byte | grep "tokens:    56" >/dev/null

# a directory with its own BPE tokenizer.json: score tokenizes the text as `tokenizers` did and
# matches transformers' log-probabilities (scripts/fixtures/make_hf_fixtures.py)
python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["text"])' "$FIX/llama_bpe/expected_logprobs.json" > "$OUT/bpe.txt"
"$HZ" score "$FIX/llama_bpe" "$OUT/bpe.txt" --json > "$OUT/bpe.json"
python3 - "$OUT/bpe.json" "$FIX/llama_bpe/expected_logprobs.json" <<'PY'
import json, sys
got, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert got["tokens"] == len(want["ids"]), (got["tokens"], len(want["ids"]))
worst = max(abs(a + b) for a, b in zip(got["nll"], want["logprobs"]))
assert len(got["nll"]) == len(want["logprobs"]) and worst < 1e-5, worst
PY

# DroPE from the imported model (QK-norm added), then eval with the temperature fit
common=(run.out_dir="$OUT" data.cache_dir="$OUT/data" data.tokenizer=byte data.seq_len=64 data.batch_size=4
        schedule.warmup_steps=2 checkpoint.every=10 eval.every=10 eval.batches=2 eval.lengths=[64,128] train.log_every=5)
"$HZ" train "$SRC/recipes/drope_from_hf.yaml" checkpoint.init_from="$FIX/llama" train.steps=10 "${common[@]}"
grep -q "init_from .*: Hugging Face LlamaForCausalLM, 20 tensors" "$OUT/drope_from_hf/train.log"
grep -q "DroPE at step 0: position encodings dropped, QK-norm added" "$OUT/drope_from_hf/train.log"
test -f "$OUT/drope_from_hf/checkpoints/step_10.h5"
"$HZ" eval "$OUT/drope_from_hf" eval.lengths=[64,128] eval.fit_drope_c=[0,0.5] eval.batches=2
test "$(wc -l < "$OUT/drope_from_hf/eval.csv")" -eq 3
# no stock architecture has whole-projection QK-norm: --stock refuses (writing nothing), the default
# writes HorizonForCausalLM with its code, and that imports back to the same scores
fails "whole-projection QK-norm" "$HZ" convert to-hf "$OUT/drope_from_hf" "$OUT/refused" --stock
test ! -e "$OUT/refused"
"$HZ" convert to-hf "$OUT/drope_from_hf" "$OUT/drope_hf" | grep "as HorizonForCausalLM" >/dev/null
grep -q '"AutoModelForCausalLM": "modeling_horizon.HorizonForCausalLM"' "$OUT/drope_hf/config.json"
test -s "$OUT/drope_hf/modeling_horizon.py" && test -s "$OUT/drope_hf/configuration_horizon.py" && test -s "$OUT/drope_hf/horizon_fields.json"
"$HZ" convert hf "$OUT/drope_hf" "$OUT/drope_back.h5" | grep "architecture: HorizonForCausalLM" >/dev/null
"$HZ" score "$OUT/drope_from_hf" "$OUT/text.txt" --json > "$OUT/e.json"
"$HZ" score "$OUT/drope_back.h5" "$OUT/text.txt" --json > "$OUT/f.json"
cmp "$OUT/e.json" "$OUT/f.json"

# DroPE without QK-norm exports (as SmolLM3, every layer NoPE) and imports back to the same scores
"$HZ" train "$SRC/recipes/drope_from_hf.yaml" checkpoint.init_from="$FIX/llama" run.name=drope_plain \
  drope.qk_norm=false train.steps=5 "${common[@]}"
"$HZ" convert to-hf "$OUT/drope_plain" "$OUT/drope_plain_hf" | grep "as SmolLM3ForCausalLM" >/dev/null
grep -q '"no_rope_layers": \[' "$OUT/drope_plain_hf/config.json"
"$HZ" score "$OUT/drope_plain" "$OUT/text.txt" --json > "$OUT/c.json"
"$HZ" score "$OUT/drope_plain_hf" "$OUT/text.txt" --json > "$OUT/d.json"   # tokenizer.json read back as byte
cmp "$OUT/c.json" "$OUT/d.json"

# SWAN from the imported model (2 layers: [global_nope, swa_rope])
"$HZ" train "$SRC/recipes/swan_from_hf.yaml" checkpoint.init_from="$FIX/llama" train.steps=5 swan.window=32 \
  swan.pattern=[global_nope,swa_rope] eval.batch_size=2 "${common[@]}"
grep -q "layers \[global_nope, swa_rope\]" "$OUT/swan_from_hf/train.log"
"$HZ" convert to-hf "$OUT/swan_from_hf" "$OUT/swan_hf" | grep "as SmolLM3ForCausalLM" >/dev/null

# refusals: a truncated weights file, a config field that is not understood
mkdir "$OUT/bad"
cp "$FIX/llama/config.json" "$OUT/bad/"
head -c 50000 "$FIX/llama/model.safetensors" > "$OUT/bad/model.safetensors"
fails "the file is truncated" "$HZ" convert hf "$OUT/bad" "$OUT/bad.h5"
cp "$FIX/llama/model.safetensors" "$OUT/bad/"
sed -i 's/"hidden_act": "silu",/"hidden_act": "silu", "frobnicate": 2,/' "$OUT/bad/config.json"
fails "'frobnicate' = 2 not understood" "$HZ" convert hf "$OUT/bad" "$OUT/bad.h5"
echo "e2e hf: OK"
