"""Does transformers reproduce Horizon's log-probabilities on a directory Horizon exported?

Loads DIR with transformers (AutoModelForCausalLM, eager attention) and scores the same tokens as
the JSON of `horizon score MODEL FILE --json` (the NLL of tokens 2..n), in fp32 and in float64
throughout (scripts/fixtures/hf_reference.py). The tokens come from --ids (whitespace-separated ids) or
--text (tokenized with DIR's own tokenizer through AutoTokenizer, which also checks the exported
tokenizer: the token count must agree).

  PY=$(scripts/tools/venv.sh)
  build/horizon score runs/quickstart text.txt --json > hz.json
  build/horizon score runs/quickstart text.txt --json --f64 > hz64.json
  "$PY" scripts/tools/hf_check_export.py runs/quickstart_hf --text text.txt --horizon hz.json --horizon64 hz64.json

Pass: in float32, max |horizon - transformers fp32| <= --tol (1e-5), or, when transformers' own fp32
strays further (large logits), the precision-floor rule max |horizon - f64 reference| <= 2 max
|transformers fp32 - f64 reference| + 1e-6; with --horizon64, max |horizon f64 - f64 reference| <=
1e-9 (the same math). Exits 1 otherwise.
"""
import argparse
import json
import sys

import torch
from transformers import AutoTokenizer

from hf_reference import logprobs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ids", help="file of whitespace-separated token ids")
    src.add_argument("--text", help="text file, tokenized with DIR's tokenizer")
    ap.add_argument("--bos", action="store_true", help="prepend the tokenizer's BOS (as horizon score --bos)")
    ap.add_argument("--horizon", required=True, help="output of horizon score ... --json")
    ap.add_argument("--horizon64", help="output of horizon score ... --json --f64")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    torch.set_num_threads(2)
    if a.ids:
        ids = [int(x) for x in open(a.ids).read().split()]
        if a.bos:
            sys.exit("--bos needs --text (the BOS id comes from the tokenizer)")
    else:
        tok = AutoTokenizer.from_pretrained(a.dir)
        ids = tok(open(a.text, encoding="utf-8", errors="surrogateescape").read(), add_special_tokens=False).input_ids
        if a.bos:
            ids = [tok.bos_token_id] + ids
    arch, lp32 = logprobs(a.dir, ids)
    _, lp64 = logprobs(a.dir, ids, f64=True)
    hz = json.load(open(a.horizon))
    if hz["tokens"] != len(ids):
        print(f"token counts differ: horizon {hz['tokens']}, transformers {len(ids)} (tokenizers disagree)")
        sys.exit(1)
    mx = lambda u, v: max(abs(x - y) for x, y in zip(u, v))
    nll32, nll64 = [-x for x in lp32], [-x for x in lp64]
    d32, d64, floor = mx(hz["nll"], nll32), mx(hz["nll"], nll64), mx(nll32, nll64)
    ok = d32 <= a.tol or d64 <= 2 * floor + 1e-6
    line = (f"{arch:20s} tokens {len(ids):5d}  mean NLL {sum(nll32) / len(nll32):.6f} (horizon {hz['mean_nll']:.6f})  "
            f"f32: |hz-tf| {d32:.2g}, |hz-ref64| {d64:.2g}, |tf-ref64| {floor:.2g}")
    if a.horizon64:
        e64 = mx(json.load(open(a.horizon64))["nll"], nll64)
        ok = ok and e64 <= 1e-9
        line += f"  f64: |hz-ref64| {e64:.2g}"
    print(line + ("  OK" if ok else "  FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
