"""Joins `horizon bench attention --json` and bench_masks_torch.py lines into one table (bench_masks.sh)."""
import json, sys

rows = [json.loads(l) for l in sys.stdin if l.strip()]
hz = {(r["T"], r["mask"]): r for r in rows if r["impl"] == "horizon"}
th = {(r["T"], r["mask"]): r for r in rows if r["impl"] == "torch"}
print(f"{'T':>6} {'mask':>10} {'pairs':>12} {'hz ms':>9} {'vs':>7} {'pair ratio':>10} {'time ratio':>10} {'eff':>5} "
      f"{'torch ms':>9} {'torch/hz':>8}")
for (T, m), r in sorted(hz.items(), key=lambda kv: (kv[0][0], list(hz).index(kv[0]))):
    base = "swa" if m.startswith("sink") else "causal"  # sinks: their cost over the window alone
    b = hz.get((T, base))
    pr = b["pairs"] / r["pairs"] if b else float("nan")
    tr = b["fwd_bwd_ms"] / r["fwd_bwd_ms"] if b else float("nan")
    if base == "swa":  # cost ratios (> 1): the sinks' extra pairs and time
        pr, tr = 1 / pr, 1 / tr
    t = th.get((T, m))
    ts = f"{t['fwd_bwd_ms']:9.1f} {t['fwd_bwd_ms'] / r['fwd_bwd_ms']:8.2f}" if t else f"{'-':>9} {'-':>8}"
    print(f"{T:>6} {m:>10} {r['pairs']:>12} {r['fwd_bwd_ms']:9.1f} {base:>7} {pr:10.3f} {tr:10.3f} "
          f"{100 * min(tr, pr) / max(tr, pr):4.0f}% {ts}")
print("vs: the mask compared against (causal; the sink rows against the same window without sinks). pair ratio "
      "and time ratio: causal's / this mask's (sink rows: this mask's / the window's); eff = the smaller over the "
      "larger; torch/hz = PyTorch SDPA time / Horizon time (> 1: Horizon faster).")
