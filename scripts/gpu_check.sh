#!/usr/bin/env bash
# Everything that needs a GPU, in one command on a lent GPU machine (run from the repository root
# there; the device tool's `run` starts in it):
#   1. unpacks .deps/gpu-deps.tar.xz (made here by scripts/gpu_deps.sh; carry `.deps`) and builds
#      build-gpu/ against it (no MPI, portable CPU GEMM, CUDA for sm_90);
#   2. runs every test binary (the CUDA cases run there instead of skipping) and lists failures;
#   3. runs compute-sanitizer memcheck over the CUDA test cases (and racecheck where stages add it);
#   4. runs the kernel lab (dev/cuda/attention: every attention kernel variant validated against
#      the reference kernels, then timed in TFLOP/s);
#   5. runs the GPU benchmarks (scripts/bench_train_gpu.sh, scripts/bench_attention_gpu.sh);
#   6. writes one markdown report: $OUT/gpu_report.md when OUT is set (the device tool's output
#      folder), else gpu_report/gpu_report.md, plus the logs beside it.
#
#   scripts/gpu_check.sh [all|build|test|sanitize|lab|bench]...   (default: all; stages run in order)
#   HZ_GPU_JOBS=16  HZ_GPU_BENCH_ROUNDS=3
#   HZ_GPU_BENCH_T=2048,8192,16384  HZ_GPU_BENCH_D=64,128   (attention benchmark; the full sweep of
#   the issue, T = 1k..32k, is scripts/bench_attention_gpu.sh with its defaults)
#
# One device call has 10 minutes: `all` fits on an H100 when the build is warm; on a cold machine
# run `build test` and `sanitize bench` as two calls (the build folder stays while the machine is
# warm). Every stage appends to the report even when an earlier one failed.
set -uo pipefail
cd "$(dirname "$0")/.."
REPORT_DIR=${OUT:-gpu_report}
mkdir -p "$REPORT_DIR"
REPORT=$REPORT_DIR/gpu_report.md
BUILD=${HZ_GPU_BUILD:-build-gpu}
JOBS=${HZ_GPU_JOBS:-$(nproc)}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(all)
has() { for s in "${stages[@]}"; do [ "$s" = "$1" ] || [ "$s" = all ] && return 0; done; return 1; }
say() { echo "$*" | tee -a "$REPORT"; }
t0=$(date +%s)
[ -f "$REPORT" ] || { echo "# Horizon GPU check" > "$REPORT"; echo >> "$REPORT"; }
say "## $(date -u +%FT%TZ): stages ${stages[*]}"
say ""
say '```'
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$REPORT"
nvcc --version | tail -2 | tee -a "$REPORT"
say '```'

# ---- build ----------------------------------------------------------------------------------------
if has build; then
  deps=/tmp/hzdeps
  if [ ! -f "$deps/lib/libhdf5_serial.a" ]; then
    [ -f .deps/gpu-deps.tar.xz ] || { say "**build: .deps/gpu-deps.tar.xz missing** (run scripts/gpu_deps.sh here and carry .deps)"; exit 1; }
    mkdir -p "$deps" && tar -xJf .deps/gpu-deps.tar.xz -C "$deps"
  fi
  b0=$(date +%s)
  if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHZ_DEPS_PREFIX="$deps" -DHZ_MPI=OFF \
       -DHZ_OPENBLAS=OFF -DHZ_DNNL=OFF -DHZ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DHZ_KERNEL_LAB=ON \
       > "$REPORT_DIR/build.log" 2>&1 &&
     cmake --build "$BUILD" -j "$JOBS" >> "$REPORT_DIR/build.log" 2>&1; then
    say "- build: ok in $(( $(date +%s) - b0 )) s"
  else
    say "- **build failed** (last lines of build.log):"
    say '```'; grep -E "error|Error" "$REPORT_DIR/build.log" | head -40 | tee -a "$REPORT"; say '```'
    exit 1
  fi
fi

# ---- tests ------------------------------------------------------------------------------------------
if has test; then
  say ""
  say "### Tests"
  say ""
  say "| suite | passed | failed | skipped | seconds |"
  say "|---|---|---|---|---|"
  fails=0
  for t in "$BUILD"/hz_test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    s0=$(date +%s)
    "$t" --gtest_brief=1 > "$REPORT_DIR/$name.log" 2>&1
    rc=$?
    pass=$(grep -Eo '\[  PASSED  \] [0-9]+' "$REPORT_DIR/$name.log" | grep -Eo '[0-9]+$' || echo 0)
    fail=$(grep -c '^\[  FAILED  \]' "$REPORT_DIR/$name.log" || true)
    skip=$(grep -Eo '\[  SKIPPED \] [0-9]+' "$REPORT_DIR/$name.log" | grep -Eo '[0-9]+$' || echo 0)
    say "| $name | ${pass:-0} | $fail | ${skip:-0} | $(( $(date +%s) - s0 )) |"
    [ $rc -ne 0 ] && fails=$((fails + 1))
  done
  if [ $fails -gt 0 ]; then
    say ""
    say "Failures:"
    say '```'
    grep -h -B2 -A12 'Failure$\|^\[  FAILED  \]' "$REPORT_DIR"/hz_test_*.log | head -150 | tee -a "$REPORT" > /dev/null
    say '```'
  fi
fi

# ---- compute-sanitizer ------------------------------------------------------------------------------
if has sanitize; then
  say ""
  say "### compute-sanitizer"
  say ""
  # "binary|gtest filter|tool": the CUDA cases of each suite
  checks=("hz_test_core|*cuda*:*Cuda*|memcheck")
  # fused attention: every CUDA case under memcheck; shared-memory races of the tensor-core and
  # reference kernels under racecheck on the edge shapes (GQA, Tq != Tk, rows without keys, ragged)
  checks+=("hz_test_attention|*FusedCuda*|memcheck")
  checks+=("hz_test_attention|Cases/FusedCudaBf16.*/*_Tq77Tk77_D64:Cases/FusedCudaBf16.*/*_Tq33Tk130_D64:Cases/FusedCudaBf16.*/*_kend40_md50:Cases/FusedCudaBf16.*/*causal_none_identity*_D64:Cases/FusedCudaBf16.*/*_Tq77Tk77_D128|racecheck")
  for extra in ${HZ_SANITIZE_EXTRA:-}; do checks+=("$extra"); done
  for c in "${checks[@]}"; do
    IFS='|' read -r bin filter tool <<< "$c"
    log="$REPORT_DIR/sanitize_${bin}_${tool}.log"
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/$bin" --gtest_brief=1 --gtest_filter="$filter" > "$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    say "- $tool on $bin ($filter): exit $rc, ${summary:-no summary (see $(basename "$log"))}"
  done
fi

# ---- kernel lab ---------------------------------------------------------------------------------------
if has lab; then
  say ""
  say "### Kernel lab: fused attention (dev/cuda/attention)"
  say ""
  say '```'
  for D in 64 128; do
    "$BUILD/attention_lab" --D $D --T 1024,8192 --reps 10 > "$REPORT_DIR/lab_d$D.log" 2>&1
    rc=$?
    tee -a "$REPORT" < "$REPORT_DIR/lab_d$D.log"
    say "(attention_lab --D $D: exit $rc)"
  done
  say '```'
fi

# ---- benchmarks -------------------------------------------------------------------------------------
if has bench; then
  say ""
  say "### Benchmarks"
  say ""
  if [ -x scripts/bench_train_gpu.sh ]; then
    HZ_BUILD_DIR="$BUILD" scripts/bench_train_gpu.sh "${HZ_GPU_BENCH_ROUNDS:-3}" 2>"$REPORT_DIR/bench_train.err" | tee -a "$REPORT"
  fi
  say ""
  say "#### Fused attention vs PyTorch (SDPA flash, FlexAttention), forward+backward, bf16"
  say ""
  HZ_BUILD_DIR="$BUILD" HZ_BENCH_OUT="$REPORT_DIR/bench_attention" \
    scripts/bench_attention_gpu.sh "${HZ_GPU_BENCH_T:-2048,8192,16384}" "${HZ_GPU_BENCH_D:-64,128}" 10 \
    2>"$REPORT_DIR/bench_attention.err" | tee -a "$REPORT"
fi

say ""
say "total: $(( $(date +%s) - t0 )) s"
