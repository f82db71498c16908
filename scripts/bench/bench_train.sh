#!/usr/bin/env bash
# Training throughput on the CPU: Horizon against the same model in PyTorch from PyPI (the current
# release in the project venv: MKL, oneDNN, AVX-512; not Debian's 1.13), fp32 and bf16 (PyTorch
# with torch.autocast("cpu", torch.bfloat16); Horizon with run.precision=bf16), interleaved round
# by round so machine noise hits both, for the quickstart shape and a GPT-2-124M shape at batch
# 4 x 64 tokens. Prints a markdown table: tokens/s (median of rounds), the share of the step in
# forward / backward / update, and ratios.
#   scripts/bench/bench_train.sh [rounds, default 3] [threads, default 2]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
THREADS=${2:-2}
scripts/setup.sh >/dev/null
PY=$(scripts/tools/venv.sh)
out=$(mktemp)
# name | horizon recipe + overrides | torch shape flags | steps
shapes=("quickstart|recipes/quickstart.yaml|--V 259 --d 128 --L 4 --H 4 --hidden 344 --T 256 --B 8 --mlp swiglu|15"
        "gpt2-124M b4xT64|recipes/bench/gpt2_small.yaml data.batch_size=4 data.seq_len=64|--V 50304 --d 768 --L 12 --H 12 --hidden 3072 --T 64 --B 4 --mlp gelu|6")
for r in $(seq "$ROUNDS"); do
  for sh in "${shapes[@]}"; do
    IFS='|' read -r name hz flags steps <<< "$sh"
    for prec in fp32 bf16; do
      OMP_NUM_THREADS=$THREADS build/horizon bench train $hz --steps "$steps" run.precision=$prec |
        sed "s/^{/{\"shape\": \"$name\", /" >> "$out"
      OMP_NUM_THREADS=$THREADS "$PY" scripts/bench/bench_train_torch.py $flags --steps "$steps" --threads "$THREADS" \
        --dtype $prec --attn sdpa | sed "s/^{/{\"shape\": \"$name\", /" >> "$out"
    done
  done
done
"$PY" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
g = {}
for r in rows:
    g.setdefault((r["shape"], "horizon" if r["impl"] == "horizon" else "torch", r["precision"]), []).append(r)
med = lambda k, key: statistics.median(x[key] for x in g[k])
print("| shape | impl | precision | tok/s (median) | rounds | fwd / bwd / update | horizon / torch |")
print("|---|---|---|---|---|---|---|")
for shape in dict.fromkeys(r["shape"] for r in rows):
    for prec in ("fp32", "bf16"):
        for impl in ("horizon", "torch"):
            k = (shape, impl, prec)
            if k not in g: continue
            tps = med(k, "tok_per_s")
            f, b, u = (med(k, x) for x in ("forward_ms", "backward_ms", "update_ms"))
            t = f + b + u
            other = (shape, "torch", prec)
            ratio = f"{tps / med(other, 'tok_per_s'):.2f}" if impl == "horizon" and other in g else ""
            print(f"| {shape} | {impl} | {prec} | {tps:,.0f} | {[round(x['tok_per_s']) for x in g[k]]} | "
                  f"{100*f/t:.0f}% / {100*b/t:.0f}% / {100*u/t:.0f}% | {ratio} |")
    h32, h16 = (shape, "horizon", "fp32"), (shape, "horizon", "bf16")
    if h32 in g and h16 in g:
        print(f"| {shape} | horizon bf16 / fp32 | | {med(h16, 'tok_per_s') / med(h32, 'tok_per_s'):.2f}x | | | |")
PY
rm -f "$out"
