#!/usr/bin/env bash
# Training throughput on one GPU: Horizon (fp32 and bf16) against the same model in PyTorch
# (bf16 autocast: eager with naive attention, eager with SDPA/FlashAttention, torch.compile + SDPA),
# interleaved round by round, for the quickstart shape and the GPT-2-small shape
# (recipes/bench/gpt2_small.yaml). Prints a markdown table: tokens/s (median of rounds), MFU
# against the GPU's dense peak (H100/H200: 989 bf16, 66.9 fp32 TFLOP/s), peak memory, the share
# of the step in forward / backward / update, and the ratio to PyTorch eager bf16.
#   scripts/bench_train_gpu.sh [rounds, default 3]      (HZ_BUILD_DIR: the build, default build)
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
HZ=${HZ_BUILD_DIR:-build}/horizon
PY=${HZ_PYTHON:-python3}
out=$(mktemp)
# name | horizon recipe | torch shape flags
shapes=("quickstart|recipes/quickstart.yaml|--V 259 --d 128 --L 4 --H 4 --hidden 344 --T 256 --B 8 --mlp swiglu"
        "gpt2-small|recipes/bench/gpt2_small.yaml|--V 50304 --d 768 --L 12 --H 12 --hidden 3072 --T 1024 --B 16 --mlp gelu")
for r in $(seq "$ROUNDS"); do
  for sh in "${shapes[@]}"; do
    IFS='|' read -r name recipe flags <<< "$sh"
    for prec in fp32 bf16; do
      "$HZ" bench train "$recipe" --steps 10 run.device=cuda run.precision=$prec 2>>/dev/stderr |
        sed "s/^{/{\"shape\": \"$name\", /" >> "$out"
    done
    for variant in "--attn naive" "--attn sdpa" "--attn sdpa --compile"; do
      peak=989
      $PY scripts/bench_train_torch.py $flags --steps 10 --device cuda --dtype bf16 $variant --peak $peak 2>>/dev/stderr |
        sed "s/^{/{\"shape\": \"$name\", /" >> "$out"
    done
  done
done
$PY - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
groups = {}
for r in rows:
    groups.setdefault((r["shape"], r["impl"], r["precision"]), []).append(r)
print("| shape | impl | precision | params | tok/s (median) | MFU | peak mem GiB | fwd / bwd / update | vs torch eager bf16 |")
print("|---|---|---|---|---|---|---|---|---|")
for shape in dict.fromkeys(r["shape"] for r in rows):
    base = groups.get((shape, "torch", "bf16"))
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
PY
rm -f "$out"
