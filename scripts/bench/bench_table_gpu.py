#!/usr/bin/env python3
"""Joins JSON lines of `horizon bench attention --device cuda --json` and bench_attention_gpu.py into
one markdown table per head dim, with the issue's targets checked:
  causal: Horizon within 15% of SDPA-flash (hz/sdpa >= 0.87 as a speed ratio) at T >= 2k;
  SWA / SCOPE: time ratio vs causal >= 0.9 x the visible-pair ratio at T >= 8k;
  per-head windows and scale-invariant logits: faster than FlexAttention."""
import json
import sys

rows = [json.loads(l) for l in sys.stdin if l.strip()]
hz = {(r["D"], r["T"], r["mask"], r["logit"], r["kernel"]): r for r in rows if r["impl"] == "horizon"}
th = {(r["impl"], r["D"], r["T"], r["mask"], r["logit"]): r for r in rows if r["impl"] != "horizon"}
if not hz:
    sys.exit("no Horizon rows")
gpu = next((r.get("device") for r in rows if r["impl"] != "horizon"), None)
print(f"GPU: {gpu or 'see the Horizon table header'}; times are forward+backward medians in ms; "
      "TFLOP/s on visible pairs (4 D per pair forward, x3.5 forward+backward)\n")


def ms(r):
    return r["fwd_bwd_ms"] if r and r.get("fwd_bwd_ms") else None


for D in sorted({k[0] for k in hz}):
    print(f"### D = {D}\n")
    print("| T | B | mask | logits | kernel | pair ratio | hz ms | hz TFLOP/s | hz fwd TFLOP/s | time ratio | eff "
          "| sdpa ms | flex ms | sdpa/hz | flex/hz | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for T in sorted({k[1] for k in hz if k[0] == D}):
      # Horizon's kernels (tensor_core_1p: with the one-pass backward; tensor_core_wg: on Hopper's
      # wgmma; tensor_core_wgo / _wgs: its forward overlapped without a producer / without overlap),
      # cuDNN's; each against its own causal
      for kernel in ("tensor_core", "tensor_core_1p", "tensor_core_wg", "tensor_core_wgo", "tensor_core_wgs",
                     "tensor_core_wg_1p", "cudnn", "reference"):
        for logit in ("identity", "scale_invariant", "logn", "swan_row", "temperature"):
            c = hz.get((D, T, "causal", logit, kernel))
            for mask in ("causal", "swa", "scope", "docs2048", "chunk2048", "sink4"):
                r = hz.get((D, T, mask, logit, kernel))
                if not r:
                    continue
                pr = c["pairs"] / r["pairs"] if c else float("nan")
                tr = c["fwd_bwd_ms"] / r["fwd_bwd_ms"] if c else float("nan")
                s, f = th.get(("sdpa_flash", D, T, mask, logit)), th.get(("flex", D, T, mask, logit))
                sm, fm = ms(s), ms(f)
                so = sm / r["fwd_bwd_ms"] if sm else None
                fo = fm / r["fwd_bwd_ms"] if fm else None
                target = ""
                if mask == "causal" and logit == "identity" and T >= 2048 and so:
                    target = "ok" if so >= 1 / 1.15 else "MISS (>15% slower than SDPA-flash)"
                if mask != "causal" and logit == "identity" and T >= 8192:
                    target = "ok" if tr >= 0.9 * pr else "MISS (time ratio < 0.9 pair ratio)"
                if (mask == "scope" or logit == "scale_invariant") and fo:
                    t2 = "ok vs flex" if fo > 1 else "MISS (slower than flex)"
                    target = f"{target}; {t2}" if target else t2
                fmt = lambda x, p=2: f"{x:.{p}f}" if x else "n/a"
                print(f"| {T} | {r['B']} | {mask} | {logit} | {r['kernel']} | {pr:.2f} | {r['fwd_bwd_ms']:.2f} | "
                      f"{r['tflops_fwd_bwd']:.1f} | {r['tflops_fwd']:.1f} | {tr:.2f} | {100 * tr / pr:.0f}% | {fmt(sm)} | {fmt(fm)} | "
                      f"{fmt(so)} | {fmt(fo)} | {target} |")
    print()
print("pair ratio = visible pairs of causal / this mask; time ratio = causal time / this case's time (same logits); "
      "eff = time ratio / pair ratio; sdpa/hz, flex/hz = PyTorch time / Horizon time (> 1: Horizon faster).")
