#!/usr/bin/env bash
# Everything that needs a GPU, on a lent GPU machine (run from the repository root there; the device
# tool's `run` starts in it, with `.deps` carried: scripts/gpu_deps.sh makes it here).
#
#   scripts/gpu_check.sh [STAGE|PRESET]...
#
# Every command first runs `preflight` (tool versions, libraries, the GPU as CUDA and PyTorch see
# it) and `build` (a no-op when the machine is still warm, a full build when it went cold; `-k 0`
# so one broken file does not hide the others), then the stages asked for, in the order given:
#   test             the CUDA cases of every suite, unbriefed (skip reasons show), each suite's
#                    crash named and rerun alone with CUDA_LAUNCH_BLOCKING=1, the rest going on
#   bench-train      training tokens/s and MFU vs PyTorch at the GPT-2-small shape: Horizon bf16,
#                    PyTorch eager (SDPA), torch.compile when 2 minutes remain, then the extras
#   bench-attention  Horizon vs SDPA-flash at every length and head dim, FlexAttention at the
#                    lengths in HZ_GPU_FLEX_T (each of its cases costs a torch.compile), bf16
#   memcheck         compute-sanitizer memcheck over the CUDA cases (kernel errors counted apart
#                    from API errors; the out-of-memory test that asks for 4 TiB is left out)
#   nccl             scripts/nccl_check.sh: the NCCL communicator on one rank and two
#   bench-terms      attention sinks and FoX forget gates vs plain causal attention
#   racecheck        compute-sanitizer racecheck (and synccheck) on the attention's edge shapes
#   lab              the kernel lab, one process per variant and head dim
#   test-cpu         the CPU cases of the same binaries (CI runs them too; here they check the GPU
#                    build's configuration)
# Presets:
#   session  every stage but test-cpu, in the order above, leaving out the stages an earlier call
#            already finished on this machine (recorded in $HZ_GPU_STATE, default /tmp/hz_gpu_state,
#            which lives as long as the machine stays warm; the attention benchmark also keeps its
#            finished lengths there and measures only the others). A session has 15 device-minutes:
#            call `session` once (timeout 600), then at once again with the time left
#            (HZ_GPU_DEADLINE) and it goes on where the first stopped, the build still warm.
#   tests = test memcheck nccl; kernels = lab racecheck bench-attention bench-terms;
#   train = bench-train; all = every stage, test-cpu last (fits only a long lease).
# A stage counts as finished when nothing in it was cut off or skipped by the deadline.
#
# What comes back: the device tool returns at most 8 files, so $OUT (else ./gpu_report) holds
# only gpu_report.md and gpu_logs.tar.gz; the logs live in a scratch folder ($HZ_GPU_LOGS, default
# /tmp/hz_gpu_logs) and are re-packed after every stage, so a command killed at its limit still
# returns every finished stage.
# A deadline: the whole command ends inside HZ_GPU_DEADLINE seconds (default 540, under the tool's
# 10 minutes): every binary runs under `timeout` bounded by the time left, and a stage that would
# start too late is skipped, saying so.
# Environment: HZ_GPU_BUILD (build-gpu), HZ_GPU_JOBS (nproc), HZ_GPU_DEADLINE (540),
# HZ_GPU_BENCH_T (1024,2048,4096,8192,16384,32768), HZ_GPU_BENCH_D (64,128), HZ_GPU_FLEX_T (8192),
# HZ_GPU_STATE (/tmp/hz_gpu_state).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
DEADLINE=${HZ_GPU_DEADLINE:-540}
OUTDIR=${OUT:-gpu_report}
LOGS=${HZ_GPU_LOGS:-/tmp/hz_gpu_logs}
BUILD=${HZ_GPU_BUILD:-build-gpu}
JOBS=${HZ_GPU_JOBS:-$(nproc)}
REPORT=$OUTDIR/gpu_report.md
mkdir -p "$OUTDIR"
rm -rf "$LOGS" && mkdir -p "$LOGS"

# ---- helpers ----------------------------------------------------------------------------------------
STATE_DIR=${HZ_GPU_STATE:-/tmp/hz_gpu_state}
STATE=$STATE_DIR/done
mkdir -p "$STATE_DIR"
ALL_STAGES=(test bench-train bench-attention memcheck nccl bench-terms racecheck lab test-cpu)
stages=()
add() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return; done; stages+=("$1"); }
session=0
for a in "$@"; do
  case "$a" in
    session) session=1; for s in "${ALL_STAGES[@]}"; do [ "$s" = test-cpu ] || add "$s"; done ;;
    tests) add test; add memcheck; add nccl ;;
    kernels) add lab; add racecheck; add bench-attention; add bench-terms ;;
    train) add bench-train ;;
    all) for s in "${ALL_STAGES[@]}"; do add "$s"; done ;;
    build|preflight) ;;  # always run
    *) if [[ " ${ALL_STAGES[*]} " == *" $a "* ]]; then add "$a"; else echo "gpu_check: unknown stage '$a'" >&2; exit 2; fi ;;
  esac
done
skipped_done=()
if [ $session = 1 ] && [ -s "$STATE" ]; then  # what an earlier call on this warm machine finished
  keep=()
  for s in "${stages[@]}"; do
    if grep -qx "$s" "$STATE"; then skipped_done+=("$s"); else keep+=("$s"); fi
  done
  stages=("${keep[@]}")
fi
say() { printf '%s\n' "$*" >> "$REPORT"; printf '%s\n' "$*"; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
pack() {  # the logs so far, atomically replaced, so a kill leaves the last complete archive
  tar -czf "$OUTDIR/.gpu_logs.tar.gz" -C "$LOGS" . 2>/dev/null && mv -f "$OUTDIR/.gpu_logs.tar.gz" "$OUTDIR/gpu_logs.tar.gz"
}
# bounded SECONDS LOG CMD...: CMD under `timeout` for at most SECONDS and never past the deadline
# (10 s kept for packing); its exit code, 124 when it was cut off
bounded() {
  local want=$1 log=$2; shift 2
  local cap=$(( $(left) - 10 )) capped=0 rc
  [ "$cap" -lt "$want" ] && { want=$cap; capped=1; }
  [ "$want" -lt 1 ] && { echo "(not started: deadline)" >> "$log"; CUT=1; return 124; }
  timeout -k 5 "$want" "$@" >> "$log" 2>&1
  rc=$?
  [ $rc -eq 124 ] && [ $capped = 1 ] && CUT=1
  return $rc
}
CUT=0  # set when the deadline cut something off in the current stage
# starts NAME NEED: false (and says so) when fewer than NEED seconds are left
starts() {
  local l; l=$(left)
  CUT=0
  if [ "$l" -lt "$2" ]; then
    say ""; say "- **$1 skipped**: ${l} s left of the ${DEADLINE} s deadline, it needs about $2 s (name it in a later call; a later session call goes on with it)"
    return 1
  fi
  say ""; say "## $1"; say ""
  return 0
}
# errors LOG: the first distinct error lines of a log, into the report (a benchmark that measured
# nothing says why)
errors() {
  local lines
  lines=$(grep -E "error|Error|FAILED|failed|Traceback|Aborted|what\(\)" "$1" 2>/dev/null | awk '!seen[$0]++' | head -12)
  [ -n "$lines" ] && { say "Errors in $(basename "$1"):"; say '```'; say "$lines"; say '```'; }
  return 0
}
# ended STAGE: the stage's time; recorded as finished (for `session`) unless the deadline cut it
ended() {
  say ""
  if [ $CUT = 0 ]; then
    echo "$1" >> "$STATE"
    say "_$1: done at $(( $(date +%s) - T0 )) s_"
  else
    say "_$1: cut short by the deadline at $(( $(date +%s) - T0 )) s (\`session\` runs it again)_"
  fi
  pack
}

{ echo "# Horizon GPU check"; echo; echo "$(date -u +%FT%TZ), stages: ${stages[*]:-none} (deadline ${DEADLINE} s)"
  [ ${#skipped_done[@]} -gt 0 ] && echo "(finished by an earlier call on this machine: ${skipped_done[*]})"; } > "$REPORT"

# ---- preflight ----------------------------------------------------------------------------------------
say ""; say "## preflight"; say ""; say '```'
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  echo "nvcc: $(nvcc --version 2>&1 | grep -o 'release [0-9.]*' || echo missing)"
  echo "cmake: $(cmake --version 2>&1 | head -1)"
  echo "ninja: $(ninja --version 2>&1 || echo missing)"
  echo "g++: $(g++ --version 2>&1 | head -1)"
  echo "compute-sanitizer: $(compute-sanitizer --version 2>&1 | grep -io 'version.*' | head -1 || echo missing)"
  echo "python3: $(python3 --version 2>&1)"
  lt=$(ls /usr/local/cuda/lib64/libcublasLt.so* 2>/dev/null | head -1)
  echo "libcublasLt: ${lt:-$(ldconfig -p 2>/dev/null | grep -m1 -o '/.*libcublasLt.so[.0-9]*' || echo MISSING)}"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO CUDA DEVICE")' 2>&1 | tail -1)"
  echo "cores: $(nproc), memory: $(free -g 2>/dev/null | awk '/Mem:/ {print $2 " GiB"}')"
  echo "deps: $( [ -f .deps/gpu-deps.tar.xz ] && du -h .deps/gpu-deps.tar.xz | cut -f1 || echo 'MISSING: carry .deps (scripts/gpu_deps.sh)')"
} 2>&1 | tee -a "$REPORT"
say '```'
NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$NCCL_ROOT" ] && say "NCCL: the PyTorch wheel's, $NCCL_ROOT"

# ---- build --------------------------------------------------------------------------------------------
say ""; say "## build"; say ""
deps=/tmp/hzdeps
if [ ! -f "$deps/lib/libhdf5_serial.a" ] && [ -f .deps/gpu-deps.tar.xz ]; then
  mkdir -p "$deps" && tar -xJf .deps/gpu-deps.tar.xz -C "$deps"
fi
b0=$(date +%s)
cfg=(-DCMAKE_BUILD_TYPE=Release -DHZ_DEPS_PREFIX="$deps" -DHZ_MPI=OFF -DHZ_OPENBLAS=OFF -DHZ_DNNL=OFF
     -DHZ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DHZ_KERNEL_LAB=ON)
[ -n "$NCCL_ROOT" ] && cfg+=(-DHZ_NCCL_ROOT="$NCCL_ROOT")
bounded 120 "$LOGS/build.log" cmake -S . -B "$BUILD" -G Ninja "${cfg[@]}"
crc=$?
brc=1
if [ $crc -eq 0 ]; then
  # everything else needs it: the build may take all but the last minute
  bounded $(( $(left) - 60 )) "$LOGS/build.log" cmake --build "$BUILD" -j "$JOBS" -- -k 0
  brc=$?
fi
if [ $crc -eq 0 ] && [ $brc -eq 0 ]; then
  say "- build: ok in $(( $(date +%s) - b0 )) s ($(grep -c '^\[' "$LOGS/build.log") steps)"
else
  say "- **build failed** (configure exit $crc, build exit $brc$([ $brc -eq 124 ] && echo ': cut off by the deadline'), $(( $(date +%s) - b0 )) s); the real error lines:"
  say '```'
  grep -E "FAILED:|error:|Error |undefined reference|multiple definition|ld returned|CMake Error|cannot find" "$LOGS/build.log" |
    grep -v '^ninja: build stopped' | awk '!seen[$0]++' | head -60 | tee -a "$REPORT"
  say '```'
  say "Stages go on with whatever binaries were built."
fi
ls "$BUILD"/hz_test_* > /dev/null 2>&1 && say "- built: $(cd "$BUILD" && ls hz_test_* horizon attention_lab 2>/dev/null | tr '\n' ' ')"
ended build

# ---- gtest runner --------------------------------------------------------------------------------------
# suite BIN FILTER TAG: runs the gtest binary over FILTER without --gtest_brief; when it dies (a
# crash, an abort, a hang cut by `timeout`) the test it was in is named, rerun alone with
# CUDA_LAUNCH_BLOCKING=1 (so the error points at the failing launch), and the suite goes on without
# it. Prints one table row; the logs are $LOGS/TAG_BIN*.log.
suite() {
  local bin=$1 filter=$2 tag=$3 excl="" n=0 rc last log name
  name=$(basename "$bin")
  [ -x "$bin" ] || { say "| $name | - | - | - | not built |"; return; }
  local s0; s0=$(date +%s)
  local died=()
  while :; do
    log="$LOGS/${tag}_${name}_$n.log"
    local f=$filter; [ -n "$excl" ] && f="$filter-${excl#:}"
    bounded 300 "$log" "$bin" --gtest_color=no --gtest_filter="$f"
    rc=$?
    if grep -q '^\[==========\] .* ran\.' "$log"; then break; fi
    # died: the last test that started and did not finish
    last=$(grep -E '^\[ RUN      \]' "$log" | tail -1 | awk '{print $4}')
    if [ -z "$last" ]; then died+=("exit $rc before any test started"); break; fi
    died+=("$last (exit $rc$([ $rc -eq 124 ] && echo ', cut off'))")
    [ "$(left)" -lt 30 ] && break
    bounded 60 "$LOGS/${tag}_${name}_${last//[^A-Za-z0-9_.]/_}_blocking.log" env CUDA_LAUNCH_BLOCKING=1 "$bin" --gtest_color=no --gtest_filter="$last"
    excl="$excl:$last"
    n=$((n + 1))
    [ $n -ge 6 ] && { died+=("too many crashes, stopped"); break; }
  done
  local all="$LOGS/${tag}_${name}_"
  local pass fail skip
  pass=$(cat "$all"[0-9]*.log | grep -cE '^\[       OK \] .* \([0-9]+ ms\)$')
  fail=$(cat "$all"[0-9]*.log | grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$')
  skip=$(cat "$all"[0-9]*.log | grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$')
  local note=""
  [ ${#died[@]} -gt 0 ] && note="died in: ${died[*]}"
  say "| $name | $pass | $fail | $skip | $(( $(date +%s) - s0 )) | $note |"
  if [ "$fail" -gt 0 ]; then
    cat "$all"[0-9]*.log | grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' | sed 's/^/    /' >> "$LOGS/${tag}_failures.txt"
  fi
  # the distinct skip reasons (gtest prints "file:line: Skipped" then the message)
  cat "$all"[0-9]*.log | grep -A1 ': Skipped$' | grep -vE ': Skipped$|^--$' | sed 's/^ *//' |
    sort | uniq -c | sort -rn | sed "s/^/    $name: /" >> "$LOGS/${tag}_skips.txt"
}
SUITES=(core autograd attention nn optim data io train hf study eval distributed nccl)
GPU_FILTER='*Cuda*:*cuda*:*Gpu*:*GPU*:*Nccl*:MixedPrecision.*'

# ---- stages ---------------------------------------------------------------------------------------------
# the test table of one pass (FILTER over every suite that has a case in it)
test_pass() {
  local filter=$1 tag=$2 s b n
  say "| suite | passed | failed | skipped | seconds | notes |"
  say "|---|---|---|---|---|---|"
  for s in "${SUITES[@]}"; do
    b="$BUILD/hz_test_$s"
    [ -x "$b" ] || continue
    [ "$(left)" -lt 40 ] && { say "| (the rest skipped: deadline) | | | | | |"; CUT=1; break; }
    # grep -c reads everything (grep -q would stop early, and under pipefail the binary's SIGPIPE
    # would read as "no cases")
    n=$("$b" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -c '^  ')
    [ "${n:-0}" -gt 0 ] || continue
    suite "$b" "$filter" "$tag"
  done
  say ""
  say "Skip reasons (count, suite: reason):"
  say '```'; sort -u "$LOGS/${tag}_skips.txt" 2>/dev/null | head -40 | tee -a "$REPORT"; say '```'
  if [ -s "$LOGS/${tag}_failures.txt" ]; then
    say "Failed:"; say '```'; head -60 "$LOGS/${tag}_failures.txt" | tee -a "$REPORT"; say '```'
    say "First failure messages:"; say '```'
    grep -h -B1 -A8 ': Failure$' "$LOGS/${tag}"_*.log | head -80 | tee -a "$REPORT" > /dev/null; say '```'
  fi
}

stage_test() {
  starts "tests (the CUDA cases of every suite)" 60 || return
  test_pass "$GPU_FILTER" gpu
  ended test
}

stage_test_cpu() {
  starts "CPU cases of the same binaries (the GPU build's configuration; CI runs them too)" 150 || return
  test_pass "*-$GPU_FILTER" cpu
  ended test-cpu
}

# sanitize TOOL BIN FILTER [SECONDS]: one line with kernel errors apart from API errors (an API
# error is a CUDA call that returned an error, which a test may provoke on purpose)
sanitize() {
  local tool=$1 bin=$2 filter=$3 log rc total api kern
  log="$LOGS/sanitize_${tool}_$(basename "$bin").log"
  [ -x "$BUILD/$bin" ] || { say "- $tool $bin: not built"; return; }
  command -v compute-sanitizer > /dev/null || { say "- $tool $bin: compute-sanitizer not found"; return; }
  bounded "${4:-240}" "$log" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
    "$BUILD/$bin" --gtest_brief=1 --gtest_color=no --gtest_filter="$filter"
  rc=$?
  total=$(grep -Eo '(ERROR|RACECHECK) SUMMARY: [0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  api=$(grep -c 'Program hit .* on CUDA API call' "$log")
  kern=$(grep -cE '^========= (Invalid|Out-of-range|Misaligned|Race|Uninitialized|Barrier|Malformed|Warp|.*[Hh]azard)' "$log")
  local ran; ran=$(grep -Eo '^\[==========\] [0-9]+ tests? from .* ran' "$log" | grep -Eo '[0-9]+' | head -1)
  say "- $tool, $bin \`$filter\`: exit $rc$([ $rc -eq 124 ] && echo ' (cut off)'), tests run ${ran:-?}, summary ${total:-none}, kernel errors $kern, API errors $api"
  [ "$kern" -gt 0 ] && { say '```'; grep -m 12 -A4 -E '^========= (Invalid|Out-of-range|Misaligned|Race|Uninitialized|Barrier)' "$log" | tee -a "$REPORT" > /dev/null; say '```'; }
}

stage_memcheck() {
  starts "compute-sanitizer memcheck" 60 || return
  # the out-of-memory test asks for 4 TiB on purpose: its API error is the test, not a bug
  sanitize memcheck hz_test_attention '*FusedCuda*' 200
  sanitize memcheck hz_test_core '*Cuda*:*cuda*-CudaTest.ErrorsNameTheCallAndWhatToDo' 150
  sanitize memcheck hz_test_train 'CudaTrain.*' 100
  sanitize memcheck hz_test_nn '*Cuda*' 60
  ended memcheck
}

stage_nccl() {
  starts "NCCL" 60 || return
  if [ -x scripts/nccl_check.sh ]; then
    OUT="$LOGS/nccl" bounded 240 "$LOGS/nccl.log" scripts/nccl_check.sh "$BUILD"
    local rc=$?
    cat "$LOGS/nccl/nccl_report.md" >> "$REPORT" 2>/dev/null || tail -30 "$LOGS/nccl.log" >> "$REPORT"
    say "- nccl_check: exit $rc"
  else
    say "- scripts/nccl_check.sh missing"
  fi
  ended nccl
}

stage_lab() {
  starts "kernel lab (dev/cuda/attention)" 60 || return
  local D v log rc
  say '```'
  for D in 64 128; do
    for v in 0 1 2 3; do
      log="$LOGS/lab_d${D}_v$v.log"
      bounded 90 "$log" "$BUILD/attention_lab" "$v" --D "$D" --T 1024,8192 --reps 10
      rc=$?
      grep -vE '^  validate .* ok$' "$log" | tee -a "$REPORT" > /dev/null
      say "(attention_lab $v --D $D: exit $rc$([ $rc -eq 124 ] && echo ', cut off'))"
    done
  done
  say '```'
  ended lab
}

stage_racecheck() {
  starts "compute-sanitizer racecheck / synccheck (attention edge shapes)" 40 || return
  local edge='Cases/FusedCudaBf16.*/*_Tq77Tk77_D64:Cases/FusedCudaBf16.*/*_Tq33Tk130_D64:Cases/FusedCudaBf16.*/*_kend40_md50:Cases/FusedCudaBf16.*/*causal_none_identity*_D64:Cases/FusedCudaBf16.*/*_Tq77Tk77_D128'
  sanitize racecheck hz_test_attention "$edge" 150
  sanitize synccheck hz_test_attention "$edge" 60
  ended racecheck
}

stage_bench_attention() {
  starts "fused attention vs PyTorch (SDPA flash, FlexAttention), forward+backward, bf16" 60 || return
  # lengths in order; a length that would start after the deadline is left out by the script
  # results kept on this machine across calls: a second call measures only the missing lengths
  HZ_BUILD_DIR="$BUILD" HZ_BENCH_OUT="$STATE_DIR/bench_attention" HZ_BENCH_RESUME=1 \
    HZ_BENCH_DEADLINE=$(( T0 + DEADLINE - 25 )) HZ_BENCH_FLEX_T="${HZ_GPU_FLEX_T:-8192}" \
    bounded 480 "$LOGS/bench_attention.log" scripts/bench_attention_gpu.sh \
    "${HZ_GPU_BENCH_T:-1024,2048,4096,8192,16384,32768}" "${HZ_GPU_BENCH_D:-64,128}" 10
  local rc=$?
  grep -q 'deadline:' "$LOGS/bench_attention.log" && CUT=1
  # the table from every result that arrived, also when the script was cut off
  cp -r "$STATE_DIR/bench_attention" "$LOGS/" 2>/dev/null
  cat "$LOGS"/bench_attention/*.json 2>/dev/null | python3 scripts/bench_table_gpu.py >> "$REPORT" 2>> "$LOGS/bench_attention.log"
  say "(bench_attention_gpu.sh: exit $rc; progress in bench_attention.log)"
  errors "$LOGS/bench_attention.log"
  ended bench-attention
}

stage_bench_terms() {
  starts "attention sinks and FoX forget gates vs plain causal attention, bf16" 30 || return
  say '```'
  bounded 90 "$LOGS/bench_terms.log" "$BUILD/horizon" bench attention --device cuda --T 4096,16384 --masks causal \
    --terms none,sink,fox,sink+fox --reps 5
  local rc=$?
  tee -a "$REPORT" < "$LOGS/bench_terms.log" > /dev/null
  say '```'
  say "(horizon bench attention --terms: exit $rc)"
  ended bench-terms
}

stage_bench_train() {
  starts "training throughput vs PyTorch" 90 || return
  HZ_BUILD_DIR="$BUILD" HZ_BENCH_OUT="$LOGS/bench_train.jsonl" HZ_BENCH_DEADLINE=$(( T0 + DEADLINE - 25 )) \
    bounded 500 "$LOGS/bench_train.log" scripts/bench_train_gpu.sh 1
  local rc=$?
  # finished once the GPT-2-small runs all ran (the quickstart shape and its torch.compile are extras)
  grep -q 'deadline: .* gpt2-small' "$LOGS/bench_train.log" && CUT=1
  python3 scripts/bench_train_table.py "$LOGS/bench_train.jsonl" >> "$REPORT" 2>> "$LOGS/bench_train.log"
  say "(bench_train_gpu.sh: exit $rc; progress in bench_train.log)"
  errors "$LOGS/bench_train.log"
  ended bench-train
}

for s in "${stages[@]}"; do "stage_${s//-/_}"; done

say ""
say "total: $(( $(date +%s) - T0 )) s"
[ $session = 1 ] && say "finished on this machine so far: $(sort -u "$STATE" 2>/dev/null | grep -v '^build$' | tr '\n' ' ')"
pack
