#!/usr/bin/env bash
# End-to-end CLI test with real tokenizers: `horizon tokenize` round trips, `data prepare` from JSONL
# and from llm.c / nanoGPT token files (identical shards), the quickstart model trained a few steps
# with the shipped BPE tokenizer on a small JSONL corpus and evaluated, and the errors a user meets
# first (model vocabulary too small, token files of another tokenizer, a JSONL field that is not
# there) reported before training with exit code 1.
set -euo pipefail
# (grep without -q: it reads its whole input, so a writer never dies of SIGPIPE under pipefail)
HZ=$1; SRC=$2; OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cd "$SRC"  # recipes name the shipped tokenizer relative to the repository root
BPE=$SRC/assets/tokenizers/kjv-bpe-4096/tokenizer.json
FIX=$SRC/tests/data/fixtures
fail() { echo "e2e bpe: FAILED: $*" >&2; exit 1; }
expect_error() {  # expect_error "message part" command...: exit code 1 and the message on stderr
  local want=$1; shift
  set +e
  local msg; msg=$("$@" 2>&1); local rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "expected exit 1, got $rc from: $* ($msg)"
  echo "$msg" | grep -F -- "$want" >/dev/null || fail "expected '$want' in: $msg"
}

# ---- tokenize: ids on one line, --decode gives the text back byte for byte ----------------------
printf 'In the beginning God created the heaven and the earth.\n\n<|endoftext|>And it was so. 12345 ' > "$OUT/t.txt"
"$HZ" tokenize "$BPE" "$OUT/t.txt" > "$OUT/ids.txt"
[ "$(wc -l < "$OUT/ids.txt")" -eq 1 ] || fail "ids are not one line"
grep -qw 0 "$OUT/ids.txt" || fail "<|endoftext|> in the text should be id 0"
"$HZ" tokenize "$BPE" --decode --add-special < "$OUT/ids.txt" > "$OUT/back.txt"
cmp "$OUT/t.txt" "$OUT/back.txt" || fail "decode --add-special does not give the text back"
"$HZ" tokenize "$BPE" --decode < "$OUT/ids.txt" | grep "endoftext" >/dev/null && fail "decode should skip special tokens"
for tok in byte "$FIX/tokenizers/llama3_style/tokenizer.json" "$FIX/tokenizers/spm_bpe.model"; do
  "$HZ" tokenize "$tok" < "$OUT/t.txt" | "$HZ" tokenize "$tok" --decode --add-special > "$OUT/back2.txt"
  [ "$tok" = "$FIX/tokenizers/spm_bpe.model" ] || cmp "$OUT/t.txt" "$OUT/back2.txt" || fail "$tok does not round-trip"
done
first=$(echo "x" | "$HZ" tokenize "$FIX/tokenizers/llama3_style/tokenizer.json" --add-special | cut -d' ' -f1)
[ "$first" = "0" ] || fail "--add-special should put <|begin_of_text|> (0) first, got $first"
"$HZ" tokenize "$BPE" --info | grep "vocab_size: 4096" >/dev/null || fail "--info"
set +e; "$HZ" tokenize > /dev/null 2>&1; rc=$?; set -e
[ "$rc" -eq 2 ] || fail "horizon tokenize without arguments should exit 2, got $rc"
expect_error "not an integer id" sh -c "echo '1 2 x' | '$HZ' tokenize '$BPE' --decode"

# ---- data prepare: the same documents as JSONL and as token files give identical shards ----------
G=$FIX/tokenizers/gpt2_style/tokenizer.json
for src in "jsonl $FIX/corpus/docs.jsonl" "tokens $FIX/corpus/gpt2_style.llmc.bin" "tokens $FIX/corpus/gpt2_style.nanogpt.bin"; do
  set -- $src
  "$HZ" data prepare "$SRC/recipes/quickstart_bpe.yaml" data.tokenizer="$G" data.source="$1" data.files="[$2]" \
    data.cache_dir="$OUT/prep_$(basename "$2")" > "$OUT/prep.log"
  grep -q "^train: .*(30 docs" "$OUT/prep.log" || fail "data prepare output: $(cat "$OUT/prep.log")"
done
cmp "$OUT/prep_docs.jsonl/train.shard" "$OUT/prep_gpt2_style.llmc.bin/train.shard" || fail "llm.c shards differ from JSONL"
cmp "$OUT/prep_docs.jsonl/val.shard" "$OUT/prep_gpt2_style.nanogpt.bin/val.shard" || fail "nanoGPT shards differ from JSONL"

# ---- train the quickstart model with the BPE tokenizer on JSONL, then evaluate -------------------
"$HZ" train "$SRC/recipes/quickstart_bpe.yaml" run.out_dir="$OUT" data.source=jsonl data.files="[$FIX/corpus/docs.jsonl]" \
  data.val_fraction=0.2 model.n_layers=2 model.d_model=64 data.seq_len=32 data.batch_size=4 train.steps=20 \
  schedule.warmup_steps=5 checkpoint.every=20 eval.every=10 eval.batches=1 eval.batch_size=2 eval.lengths=[32,64] \
  train.log_every=10 > "$OUT/train.log"
grep -q '"step": 20' "$OUT/quickstart_bpe/metrics.jsonl" || fail "no step 20 in metrics"
test -f "$OUT/quickstart_bpe/checkpoints/step_20.h5"
grep -q "kjv-bpe-4096" "$OUT/quickstart_bpe/config.yaml"
"$HZ" eval "$OUT/quickstart_bpe" eval.lengths=[32,64] eval.batches=1 > "$OUT/eval.log"
test -f "$OUT/quickstart_bpe/eval.csv"

# ---- errors before training ----------------------------------------------------------------------
expect_error "set model.vocab_size to at least 4096" \
  "$HZ" train "$SRC/recipes/quickstart_bpe.yaml" run.out_dir="$OUT" run.name=small model.vocab_size=1000
expect_error "outside the tokenizer's vocabulary" \
  "$HZ" data prepare "$SRC/recipes/quickstart_bpe.yaml" data.source=tokens data.files="[$FIX/corpus/gpt2_style.llmc.bin]" \
  data.tokenizer="$FIX/tokenizers/roberta_style/tokenizer.json" data.cache_dir="$OUT/bad"
expect_error "docs.jsonl:1" \
  "$HZ" data prepare "$SRC/recipes/quickstart_bpe.yaml" data.source=jsonl data.files="[$FIX/corpus/docs.jsonl]" \
  data.text_field=body data.cache_dir="$OUT/bad2"
expect_error "cannot open tokenizer file" \
  "$HZ" tokenize "$OUT/no_such/tokenizer.json" "$OUT/t.txt"
echo "e2e bpe: OK"
