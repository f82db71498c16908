#!/usr/bin/env python3
"""Trains the shipped byte-level BPE tokenizer on the King James Bible's TRAINING documents only
(the books `horizon data prepare` puts in train.shard for run.seed=1234, data.val_fraction=0.05,
the defaults of the quickstart recipes), so validation text stays unseen by the tokenizer too.

    scripts/setup.sh && PY=$(scripts/venv.sh) && "$PY" scripts/make_kjv_bpe.py [--vocab 4096]
        [--sweep 1024,2048,4096,8192]

Writes assets/tokenizers/kjv-bpe-<vocab>/tokenizer.json (+ tokenizer_config.json naming the roles,
so `transformers.AutoTokenizer.from_pretrained(dir)` loads it too) and prints, for each size of
the sweep, the bytes per token on the training and validation books (the measure of how much text
a context of T tokens holds).

Layout: Llama 3's pre-tokenizer (Split with its regex, then ByteLevel without prefix space), a
ByteLevel decoder, and one special token <|endoftext|> (id 0) that separates documents, as in
GPT-2: Horizon uses it as BOS, EOS and PAD.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hz_shards import bible_split  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = "<|endoftext|>"


def train_bpe(texts, vocab):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=[SPECIAL],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def bytes_per_token(tok, texts):
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    n_tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    return n_bytes / n_tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=4096, help="size of the tokenizer written to assets/")
    ap.add_argument("--sweep", default="", help="comma-separated sizes to measure (bytes/token) before writing")
    ap.add_argument("--horizon", default=os.path.join(ROOT, "build", "horizon"))
    ap.add_argument("--out", default="", help="output directory (default assets/tokenizers/kjv-bpe-<vocab>)")
    args = ap.parse_args()
    train, val = bible_split(args.horizon, seed=1234, val_fraction=0.05)
    train_texts, val_texts = [t for _, t in train], [t for _, t in val]
    print(f"training books: {len(train)} ({sum(len(t.encode()) for t in train_texts) / 1e6:.2f} MB); "
          f"validation books (unseen): {', '.join(n for n, _ in val)}", file=sys.stderr)
    sizes = [int(s) for s in args.sweep.split(",") if s] or [args.vocab]
    print(f"{'vocab':>6} {'bytes/token train':>18} {'bytes/token val':>16}")
    chosen = None
    for v in sizes:
        tok = train_bpe(train_texts, v)
        print(f"{tok.get_vocab_size():>6} {bytes_per_token(tok, train_texts):>18.3f} {bytes_per_token(tok, val_texts):>16.3f}",
              flush=True)
        if v == args.vocab:
            chosen = tok
    if chosen is None:
        chosen = train_bpe(train_texts, args.vocab)
    assert chosen.get_vocab_size() == args.vocab, f"trained {chosen.get_vocab_size()} ids, asked for {args.vocab}"
    out = args.out or os.path.join(ROOT, "assets", "tokenizers", f"kjv-bpe-{args.vocab}")
    os.makedirs(out, exist_ok=True)
    chosen.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIAL, "eos_token": SPECIAL,
                   "pad_token": SPECIAL, "unk_token": None, "model_max_length": 1 << 30}, f, indent=2)
        f.write("\n")
    print(f"wrote {os.path.relpath(out, ROOT)}/tokenizer.json ({chosen.get_vocab_size()} ids)", file=sys.stderr)


if __name__ == "__main__":
    main()
