"""Table of scripts/bench/bench_terms.sh from the JSON lines of `horizon bench attention --terms` and
scripts/bench/bench_terms_torch.py on stdin."""
import json
import sys

rows = [json.loads(line) for line in sys.stdin if line.strip()]
hz = {(r["T"], r["terms"]): r for r in rows if r["impl"] == "horizon"}
th = {(r["T"], r["terms"]): r for r in rows if r["impl"] == "torch"}
ver = next((r["version"] for r in rows if r["impl"] == "torch"), "?")
print(f"| T | terms | Horizon fwd+bwd ms | vs plain causal | PyTorch {ver} fwd+bwd ms | Horizon speedup |")
print("|---|---|---|---|---|---|")
for (T, terms), r in sorted(hz.items(), key=lambda kv: (kv[0][0], ["none", "sink", "fox", "sink+fox"].index(kv[0][1]))):
    ms = r["fwd_bwd_ms"]
    base = hz[(T, "none")]["fwd_bwd_ms"]
    t = th.get((T, terms), {})
    pt = t.get("fwd_bwd_ms")
    torch_cell = f"{pt:.0f}" if pt else t.get("skipped", "-")
    speed = f"{pt / ms:.2f}x" if pt else "-"
    print(f"| {T} | {terms} | {ms:.0f} | {ms / base:.3f} | {torch_cell} | {speed} |")
