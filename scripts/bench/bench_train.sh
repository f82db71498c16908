#!/usr/bin/env bash
# Training throughput on the CPU: Horizon against the same model in PyTorch from PyPI (the current
# release in the project venv: MKL, oneDNN, AVX-512; not Debian's 1.13) in its best setting
# (SDPA attention, fused AdamW, Horizon's GPT-2 initialisation; eager and torch.compile both run,
# the faster counts), fp32 and bf16 (PyTorch with torch.autocast("cpu", torch.bfloat16); Horizon
# with run.precision=bf16), interleaved round by round so machine noise hits every row, for the
# quickstart shape and a GPT-2-124M shape at batch 4 x 64 tokens. Rows:
#   horizon            as installed (the GEMM libraries it chose are printed with the table)
#   horizon prescott   OPENBLAS_CORETYPE=Prescott: the SSE3 kernel OpenBLAS gives a CPU newer than
#                      its table, which Horizon must not depend on
#   busy               the quickstart in fp32 while one other process keeps a core busy, against
#                      the same without it (a shared machine)
#   denormal           the quickstart in fp32 with model.init_std=1e-20, whose activations,
#                      gradients and AdamW moments underflow: flushed (the default) and IEEE
#                      (run.flush_denormals=false), against the normal model; PyTorch's own default
#                      initialisation at the 124M shape with and without torch.set_flush_denormal
# Prints the CPU, a markdown table of tokens/s (median of rounds) with ratios, and the checks the
# issue asks for.
#   scripts/bench/bench_train.sh [rounds, default 2] [threads, default 2]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-2}
THREADS=${2:-2}
scripts/setup.sh >/dev/null
PY=$(scripts/tools/venv.sh)
out=$(mktemp)
busy_pid=""
trap '[ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; rm -f "$out"' EXIT
# name | horizon recipe + overrides | torch shape flags | steps
shapes=("quickstart|recipes/quickstart.yaml|--V 259 --d 128 --L 4 --H 4 --hidden 344 --T 256 --B 8 --mlp swiglu|15"
        "gpt2-124M b4xT64|recipes/bench/gpt2_small.yaml data.batch_size=4 data.seq_len=64|--V 50304 --d 768 --L 12 --H 12 --hidden 3072 --T 64 --B 4 --mlp gelu|6")
tag() { sed "s/^{/{\"shape\": \"$1\", \"setting\": \"$2\", /" | grep '^{' >> "$out"; }
hz() { local shape=$1 setting=$2; shift 2; OMP_NUM_THREADS=$THREADS build/horizon bench train "$@" | tag "$shape" "$setting"; }
torch() { local shape=$1 setting=$2; shift 2
  OMP_NUM_THREADS=$THREADS "$PY" scripts/bench/bench_train_torch.py --threads "$THREADS" --attn sdpa "$@" 2>/dev/null |
    tag "$shape" "$setting"; }
for r in $(seq "$ROUNDS"); do
  echo "[bench_train] round $r of $ROUNDS" >&2
  for sh in "${shapes[@]}"; do
    IFS='|' read -r name recipe flags steps <<< "$sh"
    for prec in fp32 bf16; do
      hz "$name" default $recipe --steps "$steps" run.precision=$prec
      OPENBLAS_CORETYPE=Prescott hz "$name" prescott $recipe --steps "$steps" run.precision=$prec
      torch "$name" eager $flags --steps "$steps" --dtype $prec
      torch "$name" compile $flags --steps "$steps" --dtype $prec --compile
    done
  done
  # a shared machine: one competing process on one of the cores
  q=recipes/quickstart.yaml
  qflags="--V 259 --d 128 --L 4 --H 4 --hidden 344 --T 256 --B 8 --mlp swiglu"
  hz quickstart quiet $q --steps 15
  torch quickstart quiet $qflags --steps 15 --dtype fp32
  (while :; do :; done) & busy_pid=$!
  hz quickstart busy $q --steps 15
  torch quickstart busy $qflags --steps 15 --dtype fp32
  kill "$busy_pid"; wait "$busy_pid" 2>/dev/null || true; busy_pid=""
  # a model whose values underflow
  hz quickstart "denormal, flushed" $q --steps 15 model.init_std=1e-20
  hz quickstart "denormal, IEEE" $q --steps 5 --warmup 1 model.init_std=1e-20 run.flush_denormals=false
  torch "gpt2-124M b4xT64" "torch init" $(echo "${shapes[1]}" | cut -d'|' -f3) --steps 4 --dtype fp32 --init torch
  torch "gpt2-124M b4xT64" "torch init, flushed" $(echo "${shapes[1]}" | cut -d'|' -f3) --steps 4 --dtype fp32 --init torch --flush-denormal
done
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
isa=$(for f in avx512f avx512_bf16 amx_bf16; do [[ " $flags " == *" $f "* ]] && printf '%s ' "$f"; done)
echo "CPU: $cpu (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' '); ${isa:-no AVX-512}), $THREADS threads, $ROUNDS rounds, $(date -u +%F)"
"$PY" scripts/bench/bench_train_cpu_table.py "$out"
