#!/usr/bin/env python3
"""The `tokenizers` side of scripts/bench/bench_tokenizer.sh: encodes the documents of a JSONL file with a
tokenizer.json, `reps` times, and prints one JSON line per run (the same fields as
`horizon bench tokenizer`). The thread count is RAYON_NUM_THREADS, set by the caller before the
library starts its pool.

    RAYON_NUM_THREADS=2 python bench_tokenizer_hf.py TOKENIZER.json DOCS.jsonl --reps 3
"""
import argparse
import json
import os
import time

from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer")
    ap.add_argument("jsonl")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--text-field", default="text")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    tok = Tokenizer.from_file(args.tokenizer)
    docs = [json.loads(line)[args.text_field] for line in open(args.jsonl, encoding="utf-8") if line.strip()]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    # encode_batch_fast skips offsets (tokenizers >= 0.21): the library's fastest batch path
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    threads = int(os.environ.get("RAYON_NUM_THREADS", "0")) or os.cpu_count()
    for rep in range(args.reps):
        t0 = time.perf_counter()
        encs = encode(docs, add_special_tokens=False)
        s = time.perf_counter() - t0
        tokens = sum(len(e) for e in encs)
        print(json.dumps({"impl": "tokenizers", "threads": threads, "rep": rep, "docs": len(docs), "bytes": nbytes,
                          "tokens": tokens, "seconds": round(s, 6), "mb_per_s": round(nbytes / 1e6 / s, 3)}),
              flush=True)


if __name__ == "__main__":
    main()
