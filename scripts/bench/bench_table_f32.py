#!/usr/bin/env python3
"""Joins the JSON lines of scripts/bench/bench_attention_f32.sh (Horizon's `bench attention --dtype f32
--json` with the tensor-core and the reference kernels, and bench_attention_gpu.py --dtype f32) into one
markdown table: f32 causal attention, forward+backward, with the ratios an fp32 user reads (the
tensor cores' speed-up over exact f32 on Horizon's reference kernels and over PyTorch's SDPA)."""
import json
import sys

rows = [json.loads(l) for l in sys.stdin if l.strip()]
hz = {(r["kernel"], r["D"], r["T"]): r for r in rows if r.get("impl") == "horizon" and r.get("mask") == "causal"}
th = {(r["D"], r["T"]): r for r in rows if r.get("impl") == "sdpa_efficient" and r.get("fwd_bwd_ms")}
if not hz:
    sys.exit("no Horizon rows")
gpu = next((r.get("device") for r in rows if r.get("impl") != "horizon"), None)
print(f"GPU: {gpu or 'see the Horizon output'}; f32 causal attention, forward+backward medians in ms; TFLOP/s on "
      "visible pairs (4 D per pair forward, x3.5 forward+backward)\n")
print("| D | T | B | tensor cores (bf16 pairs) ms | TFLOP/s | reference (exact f32) ms | TFLOP/s | SDPA efficient ms "
      "| TFLOP/s | reference / tensor cores | SDPA / tensor cores |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
f = lambda x, p=2: f"{x:.{p}f}" if x else "n/a"
for D, T in sorted({(k[1], k[2]) for k in hz}):
    tc, ref, sd = hz.get(("tensor_core", D, T)), hz.get(("reference", D, T)), th.get((D, T))
    t = tc["fwd_bwd_ms"] if tc else None
    r = ref["fwd_bwd_ms"] if ref else None
    s = sd["fwd_bwd_ms"] if sd else None
    B = (tc or ref)["B"]
    print(f"| {D} | {T} | {B} | {f(t)} | {f(tc and tc['tflops_fwd_bwd'], 1)} | {f(r)} | {f(ref and ref['tflops_fwd_bwd'], 1)} "
          f"| {f(s)} | {f(sd and sd['tflops_fwd_bwd'], 1)} | {f(r / t if r and t else None)} | {f(s / t if s and t else None)} |")
print("\nratios: time of the other implementation / time of Horizon's tensor-core kernels (> 1: Horizon faster)")
