"""Peak memory of one HorizonForCausalLM forward per attention implementation, on this machine's CPU.

    HZ_TEST_PYTHON=... $HZ_TEST_PYTHON scripts/bench/bench_hf_attention_memory.py [--T 8192] [--layers 12]
        [--impls eager,sdpa,flex_attention,flex_attention+compile] [--threads 2]

The model is the shape of recipes/bench/gpt2_small.yaml's export (--remote-code): vocabulary 50304, hidden 768,
12 heads of 64, a GELU MLP of 3072, tied embeddings, RoPE, causal; random weights, float32, batch 1, T tokens,
no gradients, logits_to_keep=1 (the head over every position would add T x 50304 floats to every row alike).
Each implementation runs in a fresh process (torch's CPU allocator hands large buffers back to the system, so
the process's peak resident set is the measure; tracemalloc does not see torch's buffers): the table gives the
peak during the forward (VmHWM, reset just before it through /proc/self/clear_refs), the resident set before
it (weights, torch) and their difference, the forward's own peak. "flex_attention+compile" sets config.flex_compile = True: torch.compile's fused CPU kernel
(inference, float32), compiled in a first call (its seconds in the last column); the second call is measured. The last token's logits of every implementation
are compared with eager's (relative to the largest).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REMOTE = os.path.join(HERE, "..", "..", "hf")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib() -> float:
    """The peak resident set since reset_peak() (VmHWM), else since the start (ru_maxrss)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak():
    """Linux >= 4.0: writing 5 to clear_refs resets VmHWM to the current resident set, so the peak that
    follows is the forward's, not the model's construction's (which holds temporaries of its own)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def one(impl: str, T: int, layers: int, threads: int, out: str):
    import warnings

    import torch
    warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
    torch.set_num_threads(threads)
    sys.path.insert(0, REMOTE)
    from remote.configuration_horizon import HorizonConfig  # hf/remote as a package (relative imports)
    from remote.modeling_horizon import HorizonForCausalLM

    cfg = HorizonConfig(vocab_size=50304, hidden_size=768, num_hidden_layers=layers, num_attention_heads=12,
                        intermediate_size=3072, hidden_act="gelu", tie_word_embeddings=True, train_length=1024,
                        layer_kinds={"rope": {"pos": "rope", "mask": "causal"}}, layer_pattern=["rope"])
    torch.manual_seed(0)
    model = HorizonForCausalLM(cfg).eval()
    name = impl.split("+")[0]
    model.config._attn_implementation = name
    if impl.endswith("+compile"):
        model.config.flex_compile = True
    ids = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(1))
    first = None
    if impl.endswith("+compile"):  # compile in a first call; the second call is measured
        t0 = time.time()
        with torch.no_grad():
            model(ids, use_cache=False, logits_to_keep=1)
        first = time.time() - t0
    before = rss_mib()
    reset_peak()
    t0 = time.time()
    with torch.no_grad():
        logits = model(ids, use_cache=False, logits_to_keep=1).logits[0, -1]
    seconds = time.time() - t0
    torch.save(logits, out)
    print(json.dumps({"impl": impl, "T": T, "layers": layers, "peak_mib": peak_mib(), "before_mib": before,
                      "seconds": seconds, "first_call_seconds": first, "paths": sorted({l.self_attn.last_path for l in model.model.layers})}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--impls", default="eager,sdpa,flex_attention,flex_attention+compile")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        one(a.one, a.T, a.layers, a.threads, a.out)
        return
    import tempfile

    import torch
    rows, ref = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for impl in a.impls.split(","):
            out = os.path.join(tmp, impl + ".pt")
            p = subprocess.run([sys.executable, __file__, "--one", impl, "--T", str(a.T), "--layers", str(a.layers),
                                "--threads", str(a.threads), "--out", out], capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{impl}: failed (exit {p.returncode})\n{p.stderr[-2000:]}", file=sys.stderr)
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            logits = torch.load(out)
            ref = logits if ref is None else ref
            r["rel_err"] = ((logits - ref).abs().max() / ref.abs().max()).item()
            rows.append(r)
            print(json.dumps(r), file=sys.stderr)
    print(f"T {a.T}, batch 1, {a.layers} layers of GPT-2-small shape, float32, CPU ({a.threads} threads)\n")
    print("| attn_implementation | layers' paths | peak RSS (MiB) | before the forward | forward's peak | seconds "
          "| last logits vs the first row | first call (compile), s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        first = f"{r['first_call_seconds']:.1f}" if r["first_call_seconds"] is not None else ""
        print(f"| {r['impl']} | {', '.join(r['paths'])} | {r['peak_mib']:.0f} | {r['before_mib']:.0f} | "
              f"{r['peak_mib'] - r['before_mib']:.0f} | {r['seconds']:.1f} | {r['rel_err']:.1e} | {first} |")


if __name__ == "__main__":
    main()
