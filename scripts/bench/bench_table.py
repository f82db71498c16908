#!/usr/bin/python3
"""Joins JSON lines from `horizon bench attention --json` and bench_attention_torch.py into one table."""
import json, sys

rows = [json.loads(l) for l in sys.stdin if l.strip()]
hz = {(r["T"], r["mask"]): r for r in rows if r["impl"] == "horizon"}
th = {(r["T"], r["mask"]): r for r in rows if r["impl"] == "torch"}
print(f"{'T':>6} {'mask':>7} {'pair ratio':>10} {'hz ms':>9} {'time ratio':>10} {'eff':>5} {'hz MiB':>8} "
      f"{'torch ms':>9} {'torch MiB':>9} {'torch/hz':>8}")
for T in sorted({k[0] for k in hz}):
    c = hz.get((T, "causal"))
    for m in ("causal", "swa", "scope"):
        r = hz.get((T, m))
        if not r:
            continue
        pr = c["pairs"] / r["pairs"] if c else float("nan")
        tr = c["fwd_bwd_ms"] / r["fwd_bwd_ms"] if c else float("nan")
        t = th.get((T, m))
        ts = f"{t['fwd_bwd_ms']:9.1f} {t['peak_mib']:9.0f} {t['fwd_bwd_ms'] / r['fwd_bwd_ms']:8.2f}" if t else \
            f"{'skipped':>9} {'':>9} {'':>8}"
        print(f"{T:>6} {m:>7} {pr:10.2f} {r['fwd_bwd_ms']:9.1f} {tr:10.2f} {100 * tr / pr:4.0f}% "
              f"{r['peak_mib']:8.1f} {ts}")
print("pair ratio = visible pairs of causal / this mask; time ratio = causal time / this mask's time; "
      "eff = time ratio / pair ratio; torch/hz = naive PyTorch time / Horizon time (>1: Horizon faster).")
print("hz MiB = peak bytes allocated by Horizon during forward+backward above the inputs; torch MiB = process peak RSS.")
