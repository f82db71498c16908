"""Inference-time options of an exported HorizonForCausalLM, edited in config.json, against Horizon's.

Usage: compare_inference.py EXPORT_DIR IDS LOGITS OPTION VALUE TRAIN_LENGTH
       compare_inference.py --cases FILE   (one case a line, the six arguments separated by spaces:
                                            one process, one import of torch, for every case)

LOGITS are `horizon score --logits` of the token ids in IDS with `eval.OPTION=VALUE`; this copies the
export, makes in its config.json the edit `horizon eval` makes for that option (eval/inference.cpp),
loads it with transformers and checks the logits within 1e-5 (relative to the largest):
  rope_scaling  every pos: rope kind gets rope_scaling VALUE, rope_factor max(1, L / T) (1 for
                dynamic_ntk) and rope_original_context T, L the length of IDS
  longrope      the same with rope_scaling longrope and the long / short factors of the JSON file VALUE
                (LongRoPE's {long_factor, short_factor})
  lampe         "lampe": {L: 0.75 T, a: 0, b: 10, s_local, s_sink} with VALUE = "s_local,s_sink"
  drope_c       every kind with identity logits gets logit temperature, temp_c VALUE
  swan_a        every kind with pos none and mask causal gets logit swan_row, swan_a VALUE
"""
import json
import shutil
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

torch.set_num_threads(2)


def check(src, ids_file, logits_file, option, value, T):
    """One case: True when the edited export's logits agree with Horizon's within 1e-5."""
    T = int(T)
    with open(ids_file) as f:
        ids = [int(x) for x in f.read().split()]
    L = len(ids)
    work = tempfile.mkdtemp()
    try:
        d = shutil.copytree(src, work + "/export")
        with open(d + "/config.json") as f:
            cfg = json.load(f)
        touched = 0
        for kind in cfg["layer_kinds"].values():
            if option in ("rope_scaling", "longrope") and kind["pos"] == "rope":
                kind["rope_scaling"] = "longrope" if option == "longrope" else value
                kind["rope_factor"] = 1.0 if value == "dynamic_ntk" else max(1.0, L / T)
                kind["rope_original_context"] = T
                if option == "longrope":
                    with open(value) as f:
                        lr = json.load(f)
                    kind["longrope_long_factors"], kind["longrope_short_factors"] = lr["long_factor"], lr["short_factor"]
                touched += 1
            elif option == "drope_c" and kind["logit"] == "identity":
                kind["logit"], kind["temp_c"] = "temperature", float(value)
                touched += 1
            elif option == "swan_a" and kind["pos"] == "none" and kind["mask"] == "causal":
                kind["logit"], kind["swan_a"] = "swan_row", float(value)
                touched += 1
        if option == "lampe":
            local, sink = (int(x) for x in value.split(","))
            cfg["lampe"] = {"L": 0.75 * T, "a": 0.0, "b": 10.0, "s_local": local, "s_sink": sink}
            touched = 1
        assert touched, f"{option}: no layer kind to edit"
        with open(d + "/config.json", "w") as f:
            json.dump(cfg, f, indent=2)
        model = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True, dtype=torch.float32).eval()
        with torch.no_grad():
            got = model(torch.tensor([ids]), use_cache=False).logits[0]
        want = load_file(logits_file)["logits"]
        err = ((got - want).abs().max() / want.abs().max()).item()
        ok = err <= 1e-5
        print(f"  eval.{option}={value} at length {L}: relative error {err:.2e}{'' if ok else '  FAIL (> 1e-5)'}")
        return ok
    finally:
        shutil.rmtree(work)


def main():
    if sys.argv[1] == "--cases":
        with open(sys.argv[2]) as f:
            cases = [line.split() for line in f if line.strip()]
    else:
        cases = [sys.argv[1:7]]
    bad = sum(not check(*c) for c in cases)
    print(f"{len(cases)} inference-time options, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
