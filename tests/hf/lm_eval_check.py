"""lm-eval-harness on a Horizon export, offline, checked against Horizon itself.

Usage: lm_eval_check.py HORIZON RUN_DIR EXPORT_DIR WORK_DIR

Runs `lm_eval run --model hf` (transformers, trust_remote_code) on the export with the local tasks of
tests/hf/lm_eval/ (a loglikelihood task and a generate_until task over kjv_continuations.jsonl), then
checks every request against the run: each target's log-probability equals minus the sum of
`horizon score`'s per-token NLLs over the target's tokens (within 1e-4), and each greedy
continuation equals `horizon generate`'s, cut at the task's stop string (or parts from it only at a
near tie of two float32 logits). The byte tokenizer makes the tokens of context + target those of the
context followed by the target's.

In the same lm-eval run, Horizon's needle grid: `horizon eval RUN --export-lm-eval` writes a small grid
(NEEDLES: niah_single_2 and niah_single_word at lengths 256 and 512, 8 examples; the word answers'
lengths give the examples different budgets of new tokens) as the task group horizon_needles, and
`horizon eval` answers the same grid with eval.needle_per_example=true; each example's greedy
continuation equals Horizon's tokens decoded (or parts at a near tie), its correctness and score
equal Horizon's, and so do the accuracy and mean score.
"""
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# the needle grid both sides answer: 2 tasks x 2 lengths x 2 depths x 1 sample, short wording (a byte model)
NEEDLES = ["eval.needle_tasks=[niah_single_2,niah_single_word]", "eval.needle_format=short", "eval.lengths=[256,512]",
           "eval.needle_depths=[0,1]", "eval.needle_samples=1"]
MAX_LENGTH = 512  # the longest length: lm-eval cuts no prompt from the left


def tie_gap(export, context, got, want):
    """Where two greedy continuations part: how far apart the two next tokens' logits are, relative
    to the largest logit, after the context and their common prefix (the export in float32; a byte
    tokenizer, so one character is one token). Two float32 computations, each within 1e-5 of the
    truth, may order a tie closer than 2e-5 either way; anything wider is a real difference."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    if k == len(got) or k == len(want):
        return float("inf")  # one stops where the other goes on: not a tie of two tokens
    tok = AutoTokenizer.from_pretrained(export, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(export, trust_remote_code=True, dtype=torch.float32).eval()
    ids = tok(context + got[:k], add_special_tokens=False).input_ids
    a = tok(got[k], add_special_tokens=False).input_ids[0]
    b = tok(want[k], add_special_tokens=False).input_ids[0]
    with torch.no_grad():
        last = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
    return ((last[a] - last[b]).abs() / last.abs().max()).item()


def check_needles(hz, run, export, out, needles, samples):
    """lm-eval's answers to the exported needle grid against `horizon eval`'s, example by example."""
    from transformers import AutoTokenizer
    subprocess.run([hz, "eval", run, *NEEDLES, "eval.needle_per_example=true", "eval.batches=1"], check=True,
                   stdout=subprocess.DEVNULL)
    key = lambda r: (r["task"], r["length"], r["depth"], r["sample"])
    with open(os.path.join(run, "needles_examples.jsonl")) as f:
        horizon = {key(r): r for r in map(json.loads, f)}
    words = samples("horizon_niah_single_word")
    lm = samples("horizon_niah_single_2") + words
    # budgets that differ within a task: lm-eval must take each row's, not the task's largest
    assert len({s["doc"]["max_gen_toks"] for s in words}) > 1, [s["doc"]["max_gen_toks"] for s in words]
    assert len(horizon) == 8 and sorted(key(s["doc"]) for s in lm) == sorted(horizon), \
        (sorted(horizon), [key(s["doc"]) for s in lm])
    tok = AutoTokenizer.from_pretrained(export, trust_remote_code=True)
    bad = 0
    for s in lm:
        doc, h = s["doc"], horizon[key(s["doc"])]
        args = s["arguments"]["gen_args_0"]
        # the request is the row's: its prompt whole, its own budget, no stop string but EOS
        assert args["arg_0"] == doc["input"], (args["arg_0"], doc["input"])
        assert args["arg_1"]["max_gen_toks"] == doc["max_gen_toks"] and args["arg_1"]["until"] == [], args["arg_1"]
        assert len(tok(doc["input"], add_special_tokens=False).input_ids) == doc["input_tokens"]
        got, want = s["resps"][0][0], tok.decode(h["output_tokens"], skip_special_tokens=True)
        gap = 0.0 if got == want else tie_gap(export, doc["input"], got, want)
        same = s["acc"] == float(h["correct"]) and abs(s["score"] - h["score"]) <= 1e-12
        ok = gap <= 2e-5 and same
        bad += not ok
        print(f"  needle {key(doc)}: lm-eval {got!r} (acc {s['acc']}, score {s['score']}), horizon eval {want!r} "
              f"(correct {h['correct']}, score {h['score']}){'' if ok else '  MISMATCH'}")
    # the aggregates: lm-eval's accuracy and mean score, horizon eval's cells pooled
    with open(glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True)[0]) as f:
        res = json.load(f)["results"]
    with open(os.path.join(run, "needles.json")) as f:
        cells = json.load(f)["cells"]
    for name in ("horizon_needles", "horizon_niah_single_2", "horizon_niah_single_word"):
        mine = [c for c in cells if name == "horizon_needles" or name == "horizon_" + c["task"]]
        n = sum(c["samples"] for c in mine)
        acc, score = sum(c["correct"] for c in mine) / n, sum(c["score"] * c["samples"] for c in mine) / n
        ok = abs(res[name]["acc,none"] - acc) <= 1e-12 and abs(res[name]["score,none"] - score) <= 1e-9
        bad += not ok
        print(f"  {name}: lm-eval acc {res[name]['acc,none']} score {res[name]['score,none']}, horizon eval "
              f"accuracy {acc} score {score}{'' if ok else '  MISMATCH'}")
    # the export's metric says correct for the canonical answer (so a zero above is the model's)
    sys.path.insert(0, needles)
    import horizon_needles
    for s in lm:
        assert horizon_needles.process_results(s["doc"], [s["doc"]["answer"].upper()]) == {"acc": 1.0, "score": 1.0}
        assert horizon_needles.process_results(s["doc"], [" 12."])["acc"] == 0.0
    return bad


def main():
    hz, run, export, work = sys.argv[1:5]
    tasks = os.path.join(work, "tasks")
    os.makedirs(tasks, exist_ok=True)
    data = os.path.join(HERE, "lm_eval", "kjv_continuations.jsonl")
    for name in ("horizon_kjv_continuation.yaml", "horizon_kjv_generate.yaml"):
        with open(os.path.join(HERE, "lm_eval", name)) as f:
            text = f.read().replace("DATA_FILE", data)
        with open(os.path.join(tasks, name), "w") as f:
            f.write(text)
    needles = os.path.join(tasks, "needles")
    subprocess.run([hz, "eval", run, *NEEDLES, "--export-lm-eval", needles], check=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=os.path.join(work, "hf_home"), TOKENIZERS_PARALLELISM="false")
    out = os.path.join(work, "lm_eval_out")
    cmd = [sys.executable, "-m", "lm_eval", "run", "--model", "hf",
           "--model_args", f"pretrained={export},trust_remote_code=True,dtype=float32,max_length={MAX_LENGTH}",
           "--tasks", "horizon_kjv_continuation,horizon_kjv_generate,horizon_needles", "--include_path", tasks,
           "--device", "cpu", "--batch_size", "1", "--output_path", out, "--log_samples"]
    print(" ".join(cmd))
    subprocess.run(cmd, env=env, check=True)

    def samples(task):
        files = glob.glob(os.path.join(out, "**", f"samples_{task}_*.jsonl"), recursive=True)
        assert len(files) == 1, f"expected one samples file for {task}, found {files}"
        with open(files[0]) as f:
            return [json.loads(line) for line in f]

    bad = 0
    ll = samples("horizon_kjv_continuation")
    assert len(ll) == 6, len(ll)
    for s in ll:
        context, target = s["doc"]["context"], s["doc"]["target"]
        got = float(s["resps"][0][0][0])  # logged as a string
        text_file = os.path.join(work, "ll.txt")
        with open(text_file, "w") as f:
            f.write(context + target)
        r = subprocess.run([hz, "score", run, text_file, "--json"], check=True, capture_output=True, text=True)
        nll = json.loads(r.stdout)["nll"]
        want = -sum(nll[-len(target.encode()):])
        ok = abs(got - want) <= 1e-4 * max(1.0, abs(want))
        bad += not ok
        print(f"  loglikelihood {context!r} + {target!r}: lm-eval {got:.6f}, horizon score {want:.6f}"
              f"{'' if ok else '  MISMATCH'}")
    gen = samples("horizon_kjv_generate")
    assert len(gen) == 6, len(gen)
    for s in gen:
        context = s["doc"]["context"]
        got = s["resps"][0][0]
        r = subprocess.run([hz, "generate", run, "--prompt", context, "--max-new-tokens", "8", "--json"],
                           check=True, capture_output=True, text=True)
        want = json.loads(r.stdout)["text"].split("\n")[0]
        gap = 0.0 if got == want else tie_gap(export, context, got, want)
        ok = gap <= 2e-5
        bad += not ok
        note = "" if got == want else f"  (a near tie: logits {gap:.1e} apart)" if ok else f"  MISMATCH ({gap:.1e})"
        print(f"  generate_until {context!r}: lm-eval {got!r}, horizon generate {want!r}{note}")
    bad += check_needles(hz, run, export, out, needles, samples)
    print(f"lm-eval: {len(ll)} loglikelihood and {len(gen)} generate_until requests, {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
