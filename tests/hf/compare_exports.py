"""Loads Horizon exports with transformers and checks they compute what Horizon computed.

Usage: compare_exports.py MANIFEST | --sharded CASES

--sharded CASES, one line per case: PLAIN SHARDED MAX_SHARD_BYTES IDS, two exports of one run (the
default size and `--max-shard-size`): the sharded folder, copied elsewhere and loaded offline
(HF_HUB_OFFLINE=1) as a Hub user gets it, gives the plain one's logits exactly; its index has the
metadata and weight_map transformers' own save_pretrained writes for that model at that size; its
tokenizer loads with AutoTokenizer (trust_remote_code only for HorizonForCausalLM) and encodes as the
plain one's;
GenerationConfig.from_pretrained reads config.json's token ids from generation_config.json; and the
model card's front matter is what huggingface_hub's ModelCard reads (license, library_name, pipeline_tag).

MANIFEST: one line per export: NAME ARCHITECTURE DIR, where DIR holds the
export and what tests/e2e_hf_export.sh wrote beside it: ids_T.txt / ids_4T.txt (token ids),
horizon_T.safetensors, horizon_4T.safetensors, horizon_T_f64.safetensors (Horizon's logits, tensor
"logits") and horizon_generate.json (`horizon generate --json`: prompt_tokens, tokens, capacity).

Per export: (1) logits at T and 4T in float32 within 1e-5 of Horizon's, relative to the largest
logit; (2) at T in float64 within 1e-10 (HorizonForCausalLM; transformers' stock Llama-family classes
keep RMSNorm and the rotary tables in float32 even in a float64 model, so theirs are held to 1e-6);
(3) greedy generate() with the cache gives Horizon's tokens (up to a near tie of the two float32 logits);
(4) a left-padded batch gives each sequence's logits alone; (5) for HorizonForCausalLM, two documents
packed with position_ids that restart at 0 give each document's logits alone; (6) for HorizonForCausalLM,
attn_implementation "sdpa" and "flex_attention" give eager's float64 logits at T (relative 1e-12).
"""
import json
import os
import shutil
import sys
import tempfile
import warnings

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

torch.set_num_threads(2)
warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
F32_TOL, F64_TOL, F64_STOCK_TOL, PATH_TOL = 1e-5, 1e-10, 1e-6, 1e-12


def rel_err(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def ids_of(path):
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def logits(model, ids, dtype):
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].to(dtype)


def check(name, arch, d):
    failures = []
    model = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True, dtype=torch.float32)
    model.eval()
    horizon = arch == "HorizonForCausalLM"
    # (1) float32 at T and 4T
    for tag in ("T", "4T"):
        ids = ids_of(f"{d}/ids_{tag}.txt")
        want = load_file(f"{d}/horizon_{tag}.safetensors")["logits"]
        if horizon:
            model.config.context_length = None  # T = the call's length, as horizon score
        e = rel_err(logits(model, ids, torch.float32), want)
        if not e <= F32_TOL:
            failures.append(f"float32 logits at {tag} (length {len(ids)}): relative error {e:.2e} > {F32_TOL}")
        print(f"  {name}: float32 at {tag} ({len(ids)} tokens): {e:.2e}")
    # (2) float64 at T
    ids = ids_of(f"{d}/ids_T.txt")
    model64 = AutoModelForCausalLM.from_pretrained(d, trust_remote_code=True, dtype=torch.float64)
    model64.eval()
    want = load_file(f"{d}/horizon_T_f64.safetensors")["logits"]
    eager64 = logits(model64, ids, torch.float64)
    e = rel_err(eager64, want)
    tol = F64_TOL if horizon else F64_STOCK_TOL
    if not e <= tol:
        failures.append(f"float64 logits at T: relative error {e:.2e} > {tol}")
    print(f"  {name}: float64 at T: {e:.2e}")
    # (6) HorizonForCausalLM's SDPA and FlexAttention paths give eager's float64 logits (each layer on the
    # path it can take; FlexAttention uncompiled on the CPU)
    if horizon:
        for impl in ("sdpa", "flex_attention"):
            model64.set_attn_implementation(impl)
            e = rel_err(logits(model64, ids, torch.float64), eager64)
            paths = sorted({layer.self_attn.last_path for layer in model64.model.layers})
            if not e <= PATH_TOL:
                failures.append(f"{impl}: float64 logits differ from eager's by {e:.2e} > {PATH_TOL}")
            print(f"  {name}: {impl} (layers on {', '.join(paths)}) against eager, float64: {e:.2e}")
        model64.set_attn_implementation("eager")
    del model64
    # (3) greedy generation with the cache, at Horizon's decoding length (prompt + new tokens)
    with open(f"{d}/horizon_generate.json") as f:
        g = json.load(f)
    prompt, want_tokens = g["prompt_tokens"], g["tokens"]
    if horizon:
        model.config.context_length = g["capacity"]
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=len(want_tokens), do_sample=False, use_cache=True,
                             pad_token_id=model.config.pad_token_id)
    got_tokens = out[0, len(prompt):].tolist()
    eos = model.config.eos_token_id
    if eos is not None and eos in want_tokens:  # transformers stops at EOS; Horizon was not told to
        want_tokens = want_tokens[: want_tokens.index(eos) + 1]
    # Two float32 computations may order a near tie differently (each within F32_TOL of the truth), and
    # the continuations part there: a difference is accepted only where the two tokens' logits, after
    # the common prefix, are within 2 F32_TOL of each other relative to the largest logit.
    verdict = "equal"
    if got_tokens != want_tokens:
        k = next((i for i, (a, b) in enumerate(zip(got_tokens, want_tokens)) if a != b), None)
        gap = float("inf")
        if k is not None:
            last = logits(model, prompt + want_tokens[:k], torch.float32)[-1]
            gap = ((last[got_tokens[k]] - last[want_tokens[k]]).abs() / last.abs().max()).item()
        if gap <= 2 * F32_TOL:
            verdict = f"equal to token {k}, then a near tie (logits {gap:.1e} apart)"
        else:
            verdict = "DIFFER"
            failures.append(f"greedy generate(): {got_tokens} != Horizon's {want_tokens}"
                            + (f" (at token {k} the two logits are {gap:.1e} apart)" if k is not None else ""))
    print(f"  {name}: generate() {len(got_tokens)} tokens ({len(set(want_tokens))} distinct) {verdict}")
    # (4) left padding: a batch [short, long] with the short one padded on the left
    ctx = 2 * len(ids) if horizon else None
    if horizon:
        model.config.context_length = ctx  # the same T for the batch and each alone
    a, b = ids[: len(ids) // 2], ids
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    batch = torch.tensor([[pad] * (len(b) - len(a)) + a, b])
    mask = torch.tensor([[0] * (len(b) - len(a)) + [1] * len(a), [1] * len(b)])
    with torch.no_grad():
        both = model(batch, attention_mask=mask, use_cache=False).logits
        alone_a, alone_b = logits(model, a, torch.float32), logits(model, b, torch.float32)
    e = max(rel_err(both[0, len(b) - len(a):], alone_a), rel_err(both[1], alone_b))
    if not e <= F32_TOL:
        failures.append(f"left-padded batch differs from each sequence alone: {e:.2e}")
    print(f"  {name}: left-padded batch vs alone: {e:.2e}")
    # (5) packed documents through position_ids (HorizonForCausalLM: transformers' packing convention)
    if horizon:
        x, y = ids[: len(ids) // 3], ids[len(ids) // 3:]
        pos = torch.tensor([list(range(len(x))) + list(range(len(y)))])
        with torch.no_grad():
            packed = model(torch.tensor([x + y]), position_ids=pos, use_cache=False).logits[0]
            lx, ly = logits(model, x, torch.float32), logits(model, y, torch.float32)
        e = max(rel_err(packed[: len(x)], lx), rel_err(packed[len(x):], ly))
        if not e <= F32_TOL:
            failures.append(f"packed position_ids differ from the documents alone: {e:.2e}")
        print(f"  {name}: packed documents vs alone: {e:.2e}")
    return failures


def check_sharded(plain, sharded, max_shard, ids_path):
    from huggingface_hub import ModelCard
    from transformers import AutoTokenizer, GenerationConfig

    failures = []
    with open(f"{sharded}/model.safetensors.index.json") as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 2 or os.path.exists(f"{sharded}/model.safetensors"):
        failures.append(f"expected several shards and no model.safetensors, got {shards}")
    with tempfile.TemporaryDirectory() as tmp:
        # the folder alone, elsewhere: nothing in it may point back at the run or the export's place
        hub = shutil.copytree(sharded, f"{tmp}/hub")
        ids = ids_of(ids_path)
        want = logits(AutoModelForCausalLM.from_pretrained(plain, trust_remote_code=True), ids, torch.float32)
        model = AutoModelForCausalLM.from_pretrained(hub, trust_remote_code=True)
        model.eval()
        got = logits(model, ids, torch.float32)
        if not torch.equal(got, want):
            failures.append(f"sharded logits differ from the single file's: {rel_err(got, want):.2e}")
        # the index transformers writes for this model at this size
        model.save_pretrained(f"{tmp}/resaved", max_shard_size=max_shard)
        with open(f"{tmp}/resaved/model.safetensors.index.json") as f:
            theirs = json.load(f)
        if theirs["metadata"] != index["metadata"]:
            failures.append(f"index metadata {index['metadata']} != transformers' {theirs['metadata']}")
        if sorted(theirs["weight_map"]) != sorted(index["weight_map"]):
            failures.append("the index's tensors are not the ones transformers saves")
        # AutoTokenizer reads config.json: a HorizonForCausalLM's model type is its own code's, so it takes
        # trust_remote_code=True as the model does (without it transformers asks on stdin); a stock one needs none
        with open(f"{hub}/config.json") as f:
            remote = "auto_map" in json.load(f)
        text = "In the beginning God created the heaven and the earth."
        tok = AutoTokenizer.from_pretrained(hub, trust_remote_code=True) if remote else AutoTokenizer.from_pretrained(hub)
        tok_plain = AutoTokenizer.from_pretrained(plain, trust_remote_code=True)
        if tok(text)["input_ids"] != tok_plain(text)["input_ids"]:
            failures.append("the sharded folder's tokenizer encodes differently")
        gen = GenerationConfig.from_pretrained(hub)
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if getattr(gen, key) != getattr(model.config, key):
                failures.append(f"generation_config.json {key} = {getattr(gen, key)}, config.json has "
                                f"{getattr(model.config, key)}")
        card = ModelCard.load(f"{hub}/README.md").data
        if (card.library_name, card.pipeline_tag, card.license) != ("transformers", "text-generation", "other"):
            failures.append(f"model card front matter: {card.to_dict()}")
    print(f"  {sharded}: {len(shards)} shards, logits equal to the single file's: {not failures}")
    return failures


def main():
    if sys.argv[1] == "--sharded":
        bad = 0
        with open(sys.argv[2]) as f:
            cases = [line.split() for line in f if line.strip()]
        for plain, sharded, max_shard, ids in cases:
            for msg in check_sharded(plain, sharded, int(max_shard), ids):
                print(f"FAIL {sharded}: {msg}")
                bad += 1
        print(f"{len(cases)} sharded exports, {bad} failures")
        sys.exit(1 if bad else 0)
    bad = 0
    with open(sys.argv[1]) as f:
        entries = [line.split() for line in f if line.strip()]
    for name, arch, d in entries:
        print(f"{name} ({arch})")
        for msg in check(name, arch, d):
            print(f"FAIL {name}: {msg}")
            bad += 1
    print(f"{len(entries)} exports, {bad} failures")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
