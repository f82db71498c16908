#!/usr/bin/env python3
"""The table of scripts/bench/bench_train_gpu.sh: JSON lines of `horizon bench train` and
scripts/bench/bench_train_torch.py (one per run) -> markdown, medians over rounds, ratio to PyTorch
eager bf16 (SDPA); then, for each Horizon run taken with --profile, its profiled step per op (the
backend's calls and the attention's kernels: calls, milliseconds on the device, share of the step's
wall time).   bench_train_table.py RESULTS.jsonl"""
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
groups = {}
for r in rows:
    groups.setdefault((r["shape"], r["impl"], r["precision"]), []).append(r)
print("| shape | impl | precision | params | tok/s (median) | MFU | peak mem GiB | fwd / bwd / update | vs torch eager bf16 (SDPA) |")
print("|---|---|---|---|---|---|---|---|---|")
for shape in dict.fromkeys(r["shape"] for r in rows):
    base = groups.get((shape, "torch+sdpa", "bf16")) or groups.get((shape, "torch", "bf16"))
    base_tps = statistics.median(x["tok_per_s"] for x in base) if base else None
    for (s, impl, prec), g in groups.items():
        if s != shape:
            continue
        tps = statistics.median(x["tok_per_s"] for x in g)
        mfu = statistics.median(x.get("mfu", 0) for x in g)
        mem = max(x.get("peak_mem_bytes", 0) for x in g) / 2**30
        f, b, u = (statistics.median(x[k] for x in g) for k in ("forward_ms", "backward_ms", "update_ms"))
        tot = f + b + u
        ratio = f"{tps / base_tps:.2f}" if base_tps else "-"
        print(f"| {shape} | {impl} | {prec} | {g[0]['params']/1e6:.1f}M | {tps:,.0f} | {100*mfu:.1f}% | {mem:.2f} | "
              f"{100*f/tot:.0f}% / {100*b/tot:.0f}% / {100*u/tot:.0f}% | {ratio} |")
for r in rows:
    if "profile" not in r:
        continue
    step = r["profile_step_ms"]
    timed = sum(p["ms"] for p in r["profile"])
    print(f"\nProfile of one step, {r['shape']} {r['impl']} {r['precision']}: {step:.2f} ms wall, "
          f"{timed:.2f} ms timed on the device ({100 * timed / step:.0f}%; the rest is the host or the device idle)\n")
    print("| op | calls | ms | % of step |")
    print("|---|---:|---:|---:|")
    for p in r["profile"]:
        print(f"| {p['op']} | {p['calls']} | {p['ms']:.3f} | {100 * p['ms'] / step:.1f} |")
