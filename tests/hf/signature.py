"""The layer signature of a Hugging Face export: what tests/e2e_hf_export.sh groups exports by, holding
one export of each group to Horizon's logits (every one with HZ_HF_EXPORT_ALL=1).

Usage: signature.py EXPORT_DIR   (prints one line)

The signature is config.json with every number replaced by what it selects rather than its size: 0,
1 or "n" (any other value: a window of 32 and one of 128 run the same code, no window and a window do
not), every non-empty list by "[n]", and the layer kinds by the set of their own signatures (their
names and the pattern that orders them left out), plus whether query heads share key heads (GQA).
Strings, booleans and nulls stay: an architecture,
a mask, a position encoding, a flag.
"""
import json
import sys


def reduce(v):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, float)):
        return v if v in (0, 1) else "n"
    if isinstance(v, list):
        return "[n]" if v else "[]"
    if isinstance(v, dict):
        return {k: reduce(x) for k, x in v.items()}
    return repr(type(v))


def signature(export_dir):
    with open(f"{export_dir}/config.json") as f:
        cfg = json.load(f)
    kinds = cfg.pop("layer_kinds", None)
    cfg.pop("layer_pattern", None)
    sig = reduce(cfg)
    if "num_key_value_heads" in cfg and "num_attention_heads" in cfg:  # GQA: a code path, not a size
        sig["grouped_query"] = cfg["num_key_value_heads"] != cfg["num_attention_heads"]
    if kinds is not None:
        sig["layer_kinds"] = sorted({json.dumps(reduce(k), sort_keys=True) for k in kinds.values()})
    return json.dumps(sig, sort_keys=True)


if __name__ == "__main__":
    print(signature(sys.argv[1]))
