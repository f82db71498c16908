#!/usr/bin/env python3
"""Validation loss of trained runs in nats/token and bits/byte, so runs with different tokenizers
compare (a byte-level model's bits/byte is its loss / ln 2).

    /usr/bin/python3 scripts/tools/bits_per_byte.py runs/quickstart runs/quickstart_bpe [--horizon build/horizon]

For each run: the last evaluation at the training length in metrics.jsonl (nats per predicted
token), and the validation split's UTF-8 bytes and tokens from the prepared data's meta.json
(found through `horizon data prepare RUN/config.yaml`, which reuses the cached shards). The loader
puts one EOS after every document, so the stream has tokens + documents predictions for the
text's bytes:  bits/byte = loss / ln 2 * (tokens + documents) / bytes. The evaluation reads the
first eval.batches x batch of validation chunks, so this uses the split's average bytes/token.
Run it from the directory the runs were trained in (recipes name paths relative to it).
"""
import argparse
import json
import math
import os
import re
import subprocess


def seq_len(config_path):
    section = None
    for line in open(config_path, encoding="utf-8"):
        m = re.match(r"^(\w+):", line)
        if m:
            section = m.group(1)
        m = re.match(r"^  seq_len: (\d+)", line)
        if m and section == "data":
            return int(m.group(1))
    raise SystemExit(f"{config_path}: no data.seq_len")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--horizon", default="build/horizon")
    args = ap.parse_args()
    print(f"{'run':<28} {'step':>5} {'T':>5} {'val nats/token':>15} {'val bytes/token':>16} {'val bits/byte':>14}")
    for run in args.runs:
        config = os.path.join(run, "config.yaml")
        T = seq_len(config)
        evals = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if '"eval"' in l]
        evals = [e for e in evals if str(T) in e["eval"]]
        if not evals:
            raise SystemExit(f"{run}: no evaluation at length {T} in metrics.jsonl")
        last = evals[-1]
        loss = last["eval"][str(T)]["loss"]
        out = subprocess.run([args.horizon, "data", "prepare", config], check=True, capture_output=True, text=True).stdout
        meta_path = re.search(r"^meta:\s+(\S+)", out, re.M).group(1)
        val = json.load(open(meta_path))["val"]
        if not val.get("text_bytes"):
            raise SystemExit(f"{run}: the corpus was pre-tokenized; its text bytes are unknown")
        per_byte = (val["tokens"] + val["docs"]) / val["text_bytes"]
        print(f"{os.path.basename(os.path.normpath(run)):<28} {last['step']:>5} {T:>5} {loss:>15.4f} "
              f"{val['text_bytes'] / val['tokens']:>16.3f} {loss / math.log(2) * per_byte:>14.4f}")


if __name__ == "__main__":
    main()
