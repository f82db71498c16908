#!/usr/bin/env python3
"""The tables of scripts/bench/bench_train.sh: JSON lines of `horizon bench train` and
scripts/bench/bench_train_torch.py, each tagged with "shape" and "setting" -> markdown: throughput
against PyTorch's best for the shape (the fastest of eager and torch.compile, fp32 and bf16), the
shared-machine and the denormal rows, the GEMM libraries Horizon ran, and the checks of the
throughput targets.   bench_train_cpu_table.py RESULTS.jsonl"""
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
g = {}
for r in rows:
    impl = "horizon" if r["impl"] == "horizon" else "torch"
    g.setdefault((r["shape"], r["setting"], impl, r["precision"]), []).append(r)


def tps(key):
    return statistics.median(x["tok_per_s"] for x in g[key]) if key in g else None


def fmt(x):
    return f"{x:,.0f}" if x is not None else "-"


checks = []
print("| shape | precision | run | tok/s (median) | per round | vs PyTorch's best |")
print("|---|---|---|---:|---|---:|")
for shape in dict.fromkeys(r["shape"] for r in rows if r["setting"] in ("default", "eager")):
    best, best_name = 0.0, ""
    for prec in ("fp32", "bf16"):
        for s in ("eager", "compile"):
            t = tps((shape, s, "torch", prec))
            if t and t > best:
                best, best_name = t, f"{s} {prec}"
    for prec in ("fp32", "bf16"):
        for s, impl, label in (("default", "horizon", "Horizon"), ("prescott", "horizon", "Horizon, OPENBLAS_CORETYPE=Prescott"),
                               ("eager", "torch", "PyTorch eager"), ("compile", "torch", "PyTorch torch.compile")):
            k = (shape, s, impl, prec)
            if k not in g:
                continue
            t = tps(k)
            print(f"| {shape} | {prec} | {label} | {fmt(t)} | {[round(x['tok_per_s']) for x in g[k]]} | "
                  f"{t / best:.2f} |" if best else "-")
            if impl == "horizon":
                checks.append((f"{shape} {prec} {label} >= 1.2x PyTorch's best ({best_name}, {fmt(best)})", t >= 1.2 * best))
print()
print("GEMM libraries Horizon ran:", "; ".join(sorted({f"{r['precision']} ({r['setting']}): {r.get('gemm', '?')}"
                                                    for r in rows if r["impl"] == "horizon" and r["setting"] in ("default", "prescott")})))
print("OpenMP waiting:", ", ".join(sorted({r.get("omp_wait", "?") for r in rows if r["impl"] == "horizon"})))
print()
print("| shared machine (quickstart fp32) | quiet tok/s | with one busy process | busy / quiet |")
print("|---|---:|---:|---:|")
for impl, label in (("horizon", "Horizon"), ("torch", "PyTorch eager")):
    q, b = tps(("quickstart", "quiet", impl, "fp32")), tps(("quickstart", "busy", impl, "fp32"))
    if q and b:
        print(f"| {label} | {fmt(q)} | {fmt(b)} | {b / q:.2f} |")
        if impl == "horizon":
            checks.append(("Horizon under one competing process >= 40% of quiet", b >= 0.4 * q))
print()
print("| denormals | tok/s | vs the normal model |")
print("|---|---:|---:|")
normal = tps(("quickstart", "default", "horizon", "fp32"))
for s in ("denormal, flushed", "denormal, IEEE"):
    t = tps(("quickstart", s, "horizon", "fp32"))
    if t and normal:
        print(f"| Horizon quickstart fp32, init_std 1e-20, {s.split(', ')[1]} | {fmt(t)} | {t / normal:.2f} |")
        if s == "denormal, flushed":
            checks.append(("Horizon's denormal-heavy model (flushed, the default) within 10% of the normal one", t >= 0.9 * normal))
if normal:
    print(f"| Horizon quickstart fp32, normal model | {fmt(normal)} | 1.00 |")
tn, tf = tps(("gpt2-124M b4xT64", "torch init", "torch", "fp32")), tps(("gpt2-124M b4xT64", "torch init, flushed", "torch", "fp32"))
if tn and tf:
    print(f"| PyTorch 124M fp32, its default init | {fmt(tn)} | - |")
    print(f"| PyTorch 124M fp32, its default init, set_flush_denormal(True) | {fmt(tf)} | {tf / tn:.2f}x unflushed |")
print()
for what, ok in checks:
    print(f"- [{'x' if ok else ' '}] {what}")
