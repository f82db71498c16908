#!/usr/bin/env bash
# Encoding throughput: Horizon's tokenizer.json BPE vs the Hugging Face `tokenizers` library on the
# same documents, 1 and 2 threads, interleaved (Horizon, tokenizers, Horizon, ...) so machine noise
# hits both; prints MB/s of UTF-8 text (medians over rounds x reps, the first rep of each process
# included: both libraries start with a cold word cache) and the ratio. Also checks that both
# produce the same number of tokens.
#
#   scripts/bench/bench_tokenizer.sh [rounds, default 3]      (HZ_VENV=/path to reuse a venv)
#
# Corpus: the King James Bible (Horizon's embedded corpus), cut into documents of 20 verses (~4.3 MB). Tokenizers:
# GPT-2 and Llama-3 layouts trained on it with `tokenizers` (32000 ids), and the shipped
# assets/tokenizers/kjv-bpe-4096 tokenizer.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
scripts/setup.sh >/dev/null
PY=$(scripts/tools/venv.sh)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$PY" - "$WORK" <<'PY'
import json, os, sys
sys.path.insert(0, "scripts")
from hz_shards import bible_split
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
work = sys.argv[1]
train, _ = bible_split("build/horizon", val_fraction=0.0)
docs = []
for _, text in train:
    verses = text.split("\n")
    docs += ["\n".join(verses[i:i + 20]) for i in range(0, len(verses), 20)]
with open(os.path.join(work, "docs.jsonl"), "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
for name, pre in (("gpt2-32k", pre_tokenizers.ByteLevel(add_prefix_space=False)),
                  ("llama3-32k", pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(llama3), "isolated"),
                                                          pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))):
    tok = Tokenizer(models.BPE(ignore_merges=name.startswith("llama3")))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|endoftext|>"],
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.save(os.path.join(work, f"{name}.json"))
print(f"corpus: {len(docs)} documents, {sum(len(d.encode()) for d in docs) / 1e6:.2f} MB", file=sys.stderr)
PY

TOKS=("$WORK/gpt2-32k.json" "$WORK/llama3-32k.json")
[ -f assets/tokenizers/kjv-bpe-4096/tokenizer.json ] && TOKS+=(assets/tokenizers/kjv-bpe-4096/tokenizer.json)
out="$WORK/results.jsonl"
for tok in "${TOKS[@]}"; do
  label=${tok#"$WORK/"}
  for threads in 1 2; do
    for r in $(seq "$ROUNDS"); do
      OMP_NUM_THREADS=$threads build/horizon bench tokenizer "$tok" "$WORK/docs.jsonl" --threads "$threads" --reps 3 |
        sed "s|^{|{\"tokenizer\": \"$label\", |" >> "$out"
      RAYON_NUM_THREADS=$threads "$PY" scripts/bench/bench_tokenizer_hf.py "$tok" "$WORK/docs.jsonl" --reps 3 |
        sed "s|^{|{\"tokenizer\": \"$label\", |" >> "$out"
    done
  done
done

# Is a second core free? The same loop in 1 and in 2 concurrent processes: equal times mean yes.
"$PY" - <<'PY'
import multiprocessing as mp, time
def spin(_):
    x = 0
    for i in range(3_000_000):
        x += i
def timed(n):
    t = time.perf_counter()
    with mp.Pool(n) as p:
        p.map(spin, range(n))
    return time.perf_counter() - t
one, two = timed(1), timed(2)
if two > 1.5 * one:
    print(f"note: 2 processes of equal work took {two / one:.1f}x one process: the second core is busy, "
          "so the 2-thread rows cannot show a speed-up")
PY
"$PY" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'tokenizer':<34} {'threads':>7} {'horizon MB/s':>13} {'tokenizers MB/s':>16} {'ratio':>6}  tokens (horizon = tokenizers)")
for tok in dict.fromkeys(r["tokenizer"] for r in rows):
    for t in (1, 2):
        h = [r for r in rows if r["tokenizer"] == tok and r["threads"] == t and r["impl"] == "horizon"]
        f = [r for r in rows if r["tokenizer"] == tok and r["threads"] == t and r["impl"] == "tokenizers"]
        if not h or not f:
            continue
        hm, fm = statistics.median(r["mb_per_s"] for r in h), statistics.median(r["mb_per_s"] for r in f)
        same = {r["tokens"] for r in h} == {r["tokens"] for r in f}
        print(f"{tok:<34} {t:>7} {hm:>13.2f} {fm:>16.2f} {hm / fm:>6.2f}  {h[0]['tokens']} ({'equal' if same else 'DIFFERENT'})")
print(f"(medians of {len(h)} runs each; corpus {h[0]['bytes'] / 1e6:.2f} MB in {h[0]['docs']} documents)")
PY
