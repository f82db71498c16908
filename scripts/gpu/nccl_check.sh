#!/usr/bin/env bash
# NCCL without MPI, on a GPU machine (Horizon's variables with an id file, and torchrun's with the
# TCP rendezvous at MASTER_ADDR / MASTER_PORT; docs/parallel.md "CUDA ranks without MPI"). Run from anywhere; every step runs even when an
# earlier one failed, each under `timeout`, and its exit code is reported:
#   0. build: when BUILD_DIR has no hz_test_nccl, reconfigures BUILD_DIR (an existing CMake build,
#      e.g. scripts/gpu/gpu_check.sh's build-gpu) with -DHZ_NCCL_ROOT=<NCCL prefix> and builds
#      hz_test_nccl + horizon (else only brings them up to date);
#   1. one rank: hz_test_nccl EnvBootstrap.* + NcclOneRank.* (prints the libnccl version);
#   2. two ranks: hz_test_nccl NcclTwoRanks.* started twice (HZ_RANK=0/1, one id file);
#   3. two ranks training: horizon train recipes/quickstart.yaml train.steps=20 run.device=cuda,
#      started with torchrun's variables and the TCP rendezvous (both ranks exit 0, rank 0 prints
#      its final loss);
#   4. context parallelism: the same run on one rank, and on two ranks sharing each sequence
#      (parallel.context=2: the ring, then the all-gather): the step-20 losses agree to 1e-3; then
#      recipes/pretrain_streaming_sinks.yaml in bf16 (window layers with sink tokens: the halo, on
#      the tensor-core kernels' general variant), agreeing to 2e-2.
# With fewer GPUs than ranks NCCL refuses two ranks on one GPU ("Duplicate GPU detected"); the
# two-rank steps then run again with a distinct NCCL_HOSTID per rank (each rank looks like its own
# host; they talk over loopback sockets), and the report says so.
#
#   scripts/gpu/nccl_check.sh [BUILD_DIR]          (default: build-gpu if it exists, else build)
#   HZ_NCCL_ROOT=<prefix with include/nccl.h, lib/libnccl.so.2>   (default: the nvidia-nccl pip wheel)
#   HZ_NCCL_JOBS=N (build parallelism)   OUT=<dir> (report: $OUT/nccl_report.md, else nccl_report/)
#   HZ_NCCL_CHECK_GPUS=N overrides the GPU count from `horizon info` (to test this script without a GPU)
set -u
cd "$(dirname "$0")/../.." || exit 1
SRC=$PWD
BUILD=${1:-}
if [ -z "$BUILD" ]; then
  if [ -d build-gpu ]; then BUILD=build-gpu; else BUILD=build; fi
fi
REPORT_DIR=${OUT:-nccl_report}
mkdir -p "$REPORT_DIR"
REPORT_DIR=$(cd "$REPORT_DIR" && pwd)
REPORT=$REPORT_DIR/nccl_report.md
JOBS=${HZ_NCCL_JOBS:-$(nproc)}
TMP=$(mktemp -d /tmp/hz_nccl_check.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
summary=()  # "| part | result | exit codes | seconds | detail |" rows
row() { summary+=("| $1 | $2 | $3 | $4 | $5 |"); }
log() { echo "[nccl_check] $*" >&2; }
# NCCL's own warnings (e.g. "Duplicate GPU detected") in the logs, unless the caller chose a level
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
unset HZ_RANK HZ_WORLD_SIZE HZ_LOCAL_RANK HZ_NCCL_ID_FILE RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT \
  SLURM_STEP_NUM_TASKS SLURM_PROCID SLURM_LOCALID HZ_JOB_TOKEN TORCHELASTIC_RUN_ID

# ---- 0. build -----------------------------------------------------------------------------------
t0=$(date +%s)
nccl_root=${HZ_NCCL_ROOT:-$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)}
build_rc=0
build_detail=""
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  build_rc=1
  build_detail="no CMake build in $BUILD (configure it first, e.g. scripts/gpu/gpu_check.sh build)"
else
  if [ ! -x "$BUILD/hz_test_nccl" ]; then
    log "configuring $BUILD with HZ_NCCL_ROOT=${nccl_root:-<unset>}"
    cmake -S . -B "$BUILD" ${nccl_root:+-DHZ_NCCL_ROOT="$nccl_root"} > "$REPORT_DIR/nccl_configure.log" 2>&1
    build_rc=$?
  fi
  nccl_line=$(cmake -S . -B "$BUILD" -N -L 2>/dev/null | grep -E '^NCCL_LIBRARY' | head -1)
  if [ $build_rc -eq 0 ]; then
    log "building hz_test_nccl horizon in $BUILD"
    cmake --build "$BUILD" -j "$JOBS" --target hz_test_nccl horizon > "$REPORT_DIR/nccl_build.log" 2>&1
    build_rc=$?
  fi
  if [ $build_rc -ne 0 ]; then
    build_detail="see nccl_configure.log / nccl_build.log; $(grep -hE 'NCCL=|error' "$REPORT_DIR"/nccl_configure.log \
      "$REPORT_DIR"/nccl_build.log 2>/dev/null | head -3 | tr '\n' ' ')"
  else
    ldd_line=$(ldd "$BUILD/horizon" 2>/dev/null | grep nccl | awk '{print $1, $2, $3}')
    build_detail="${nccl_line:-NCCL_LIBRARY ?}; ldd horizon: ${ldd_line:-no libnccl}"
  fi
fi
row "build (hz_test_nccl, horizon)" "$([ $build_rc -eq 0 ] && echo pass || echo FAIL)" "$build_rc" \
  "$(( $(date +%s) - t0 ))" "$build_detail"
TEST=$BUILD/hz_test_nccl
HZ=$BUILD/horizon

# GPUs CUDA sees (CUDA_VISIBLE_DEVICES applies); HZ_NCCL_CHECK_GPUS overrides (testing the script)
ngpu=${HZ_NCCL_CHECK_GPUS:-$("$HZ" info 2>/dev/null | grep -Eo '[0-9]+ device\(s\) visible' | grep -Eo '^[0-9]+')}
ngpu=${ngpu:-0}
nccl_version="?"

# gtest counts of a log: "passed P, failed F, skipped S"
counts() {
  local p f s
  p=$(grep -Eo '\[  PASSED  \] [0-9]+' "$1" | grep -Eo '[0-9]+$' | head -1)
  f=$(grep -c '^\[  FAILED  \]' "$1")
  s=$(grep -Eo '\[  SKIPPED \] [0-9]+' "$1" | grep -Eo '[0-9]+$' | head -1)
  echo "passed ${p:-0}, failed ${f:-0}, skipped ${s:-0}"
}

# ---- 1. one rank --------------------------------------------------------------------------------
t0=$(date +%s)
one=$REPORT_DIR/nccl_one_rank.log
if [ -x "$TEST" ]; then
  timeout 120 "$TEST" --gtest_brief=1 --gtest_filter='EnvBootstrap.*:NcclOneRank.*' > "$one" 2>&1
  rc=$?
  nccl_version=$(grep -Eo 'NCCL version \(libnccl loaded\): [0-9.]+' "$one" | grep -Eo '[0-9.]+$' | head -1)
  skipped=$(grep -Eo '\[  SKIPPED \] [0-9]+' "$one" | grep -Eo '[0-9]+$' | head -1)
  res=$([ $rc -eq 0 ] && echo pass || echo FAIL)
  [ $rc -eq 0 ] && [ "${skipped:-0}" != 0 ] && res="pass, ${skipped} skipped"
  row "one rank (EnvBootstrap, NcclOneRank)" "$res" "$rc" "$(( $(date +%s) - t0 ))" "$(counts "$one")"
else
  row "one rank (EnvBootstrap, NcclOneRank)" "not run" "-" 0 "no $TEST"
fi

# ---- two ranks ----------------------------------------------------------------------------------
# pair NAME MODE CMD...: starts CMD as rank 0 and rank 1 (HZ_WORLD_SIZE=2, a fresh id file; with
# PAIR_LAUNCH=tcp torchrun's WORLD_SIZE / RANK / LOCAL_RANK / TORCHELASTIC_RUN_ID and
# MASTER_ADDR=localhost, a fresh MASTER_PORT), each under `timeout 120`, logs NAME.rank{0,1}.log; MODE "hostid" gives each rank its
# own NCCL_HOSTID. Sets pair_rc0 / pair_rc1.
pair() {
  local name=$1 mode=$2
  shift 2
  local id=$TMP/$name.$mode.id
  local extra=()
  [ "$mode" = hostid ] && extra=(NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)
  local r pids=() port=$(( 29500 + RANDOM % 10000 ))
  for r in 0 1; do
    local h=()
    [ "$mode" = hostid ] && h=(NCCL_HOSTID="hz-nccl-check-rank$r")
    local launch=(HZ_WORLD_SIZE=2 HZ_RANK=$r HZ_LOCAL_RANK=$r HZ_NCCL_ID_FILE="$id")
    [ "${PAIR_LAUNCH:-file}" = tcp ] && launch=(WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r MASTER_ADDR=localhost MASTER_PORT=$port
                                                   TORCHELASTIC_RUN_ID="nccl-check-$$-$port")
    env "${launch[@]}" ${extra[@]+"${extra[@]}"} ${h[@]+"${h[@]}"} \
      timeout 120 "$@" > "$REPORT_DIR/$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}"; pair_rc0=$?
  wait "${pids[1]}"; pair_rc1=$?
}
# NCCL's refusal (its own WARN line, or Horizon's message for ncclInvalidUsage at init); not the
# shared-GPU warning every rank on a shared GPU prints
duplicate_gpu() { grep -qE 'Duplicate GPU detected|ncclCommInitRank failed: invalid usage' "$REPORT_DIR/$1.rank0.log" "$REPORT_DIR/$1.rank1.log"; }
mode=plain
mode_note=""

# ---- 2. two ranks: hz_test_nccl -----------------------------------------------------------------
t0=$(date +%s)
if [ ! -x "$TEST" ]; then
  row "two ranks (NcclTwoRanks)" "not run" "-" 0 "no $TEST"
elif [ "${ngpu:-0}" -lt 1 ]; then
  row "two ranks (NcclTwoRanks)" "skipped" "-" 0 "no GPU (horizon info: 0 devices visible)"
else
  pair two_ranks plain "$TEST" --gtest_brief=1 --gtest_filter='NcclTwoRanks.*'
  if [ $pair_rc0 -ne 0 ] && duplicate_gpu two_ranks; then
    for r in 0 1; do mv "$REPORT_DIR/two_ranks.rank$r.log" "$REPORT_DIR/two_ranks.plain.rank$r.log"; done
    mode=hostid
    mode_note="NCCL refused two ranks on one GPU (Duplicate GPU detected; logs *.plain.*): ran with NCCL_HOSTID per rank (sockets over lo)"
    log "$mode_note"
    pair two_ranks hostid "$TEST" --gtest_brief=1 --gtest_filter='NcclTwoRanks.*'
  fi
  res=$([ $pair_rc0 -eq 0 ] && [ $pair_rc1 -eq 0 ] && echo pass || echo FAIL)
  grep -q '\[  SKIPPED \]' "$REPORT_DIR/two_ranks.rank0.log" && res="FAIL (cases skipped)"
  row "two ranks (NcclTwoRanks, $mode)" "$res" "$pair_rc0 / $pair_rc1" "$(( $(date +%s) - t0 ))" \
    "rank 0: $(counts "$REPORT_DIR/two_ranks.rank0.log"); rank 1: $(counts "$REPORT_DIR/two_ranks.rank1.log")"
fi

# ---- 3. two ranks: horizon train ----------------------------------------------------------------
t0=$(date +%s)
train_args=(train "$SRC/recipes/quickstart.yaml" train.steps=20 schedule.warmup_steps=5 train.log_every=10 run.device=cuda
            run.out_dir="$TMP/runs" data.cache_dir="$TMP/data" eval.every=0 "eval.lengths=[256]" eval.batches=2
            checkpoint.every=0)
data_note="the embedded Bible"
if [ ! -x "$HZ" ]; then
  row "two ranks (horizon train)" "not run" "-" 0 "no $HZ"
elif [ "${ngpu:-0}" -lt 1 ]; then
  row "two ranks (horizon train)" "skipped" "-" 0 "no GPU"
else
  PAIR_LAUNCH=tcp pair train "$mode" "$HZ" "${train_args[@]}"
  if [ "$mode" = plain ] && [ $pair_rc0 -ne 0 ] && duplicate_gpu train; then
    for r in 0 1; do mv "$REPORT_DIR/train.rank$r.log" "$REPORT_DIR/train.plain.rank$r.log"; done
    mode=hostid
    mode_note="NCCL refused two ranks on one GPU (Duplicate GPU detected): ran with NCCL_HOSTID per rank (sockets over lo)"
    PAIR_LAUNCH=tcp pair train hostid "$HZ" "${train_args[@]}"
  fi
  last=$(grep -E 'step +20/20 .*loss' "$REPORT_DIR/train.rank0.log" | tail -1 | grep -Eo 'loss [0-9.]+')
  comm=$(grep -Eo '\(nccl communicator[^)]*\)' "$REPORT_DIR/train.rank0.log" | head -1)
  res=$([ $pair_rc0 -eq 0 ] && [ $pair_rc1 -eq 0 ] && [ -n "$last" ] && echo pass || echo FAIL)
  row "two ranks (horizon train quickstart, 20 steps, torchrun variables + TCP rendezvous, $mode)" "$res" "$pair_rc0 / $pair_rc1" \
    "$(( $(date +%s) - t0 ))" "rank 0 final ${last:-loss missing} ${comm}; $data_note"
fi

# ---- 4. context parallelism over NCCL -------------------------------------------------------------
t0=$(date +%s)
if [ ! -x "$HZ" ] || [ "${ngpu:-0}" -lt 1 ]; then
  row "context parallel (horizon train, parallel.context=2)" "skipped" "-" 0 "no GPU or no $HZ"
else
  final_loss() { grep -E 'step +20/20 .*loss' "$1" | tail -1 | grep -Eo 'loss [0-9.]+' | grep -Eo '[0-9.]+$'; }
  timeout 120 "$HZ" "${train_args[@]}" run.name=cp_one > "$REPORT_DIR/cp_one.log" 2>&1
  one_rc=$?
  one_loss=$(final_loss "$REPORT_DIR/cp_one.log")
  for ex in ring all_gather; do
    pair "cp_$ex" "$mode" "$HZ" "${train_args[@]}" parallel.context=2 parallel.context_exchange=$ex run.name="cp_$ex"
    cp_loss=$(final_loss "$REPORT_DIR/cp_$ex.rank0.log")
    agree=$(python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print('yes' if abs(a - b) <= 1e-3 * abs(a) else 'no')" \
      "${one_loss:-nan}" "${cp_loss:-nan}" 2>/dev/null)
    res=$([ $one_rc -eq 0 ] && [ $pair_rc0 -eq 0 ] && [ $pair_rc1 -eq 0 ] && [ "$agree" = yes ] && echo pass || echo FAIL)
    row "context parallel ($ex, 2 ranks, $mode)" "$res" "$one_rc / $pair_rc0 / $pair_rc1" "$(( $(date +%s) - t0 ))" \
      "step-20 loss one rank ${one_loss:-missing}, two ranks ${cp_loss:-missing}"
  done
  # through the halo: window layers with sink tokens (StreamingLLM) in bf16, Horizon's tensor-core
  # kernels (their general variant: the pinned sinks' positions); the global layers take the ring.
  # bf16 rounds the two runs' sums in other orders: their step-20 losses agree to 2e-2
  t0=$(date +%s)
  halo_args=(train "$SRC/recipes/pretrain_streaming_sinks.yaml" train.steps=20 schedule.warmup_steps=5
             train.log_every=10 run.device=cuda run.precision=bf16 run.out_dir="$TMP/runs" data.cache_dir="$TMP/data"
             eval.every=0 eval.final=false checkpoint.every=0 data.seq_len=1024 data.batch_size=2)
  # (T 1024 on 2 ranks: chunks of 256 tokens, longer than the window's 127 keys back, so the halo)
  timeout 180 "$HZ" "${halo_args[@]}" run.name=halo_one > "$REPORT_DIR/cp_halo_one.log" 2>&1
  one_rc=$?
  one_loss=$(final_loss "$REPORT_DIR/cp_halo_one.log")
  pair "cp_halo" "$mode" "$HZ" "${halo_args[@]}" parallel.context=2 run.name=halo_two
  cp_loss=$(final_loss "$REPORT_DIR/cp_halo.rank0.log")
  agree=$(python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print('yes' if abs(a - b) <= 2e-2 * abs(a) else 'no')" \
    "${one_loss:-nan}" "${cp_loss:-nan}" 2>/dev/null)
  res=$([ $one_rc -eq 0 ] && [ $pair_rc0 -eq 0 ] && [ $pair_rc1 -eq 0 ] && [ "$agree" = yes ] && echo pass || echo FAIL)
  row "context parallel through the halo (window 128 + 4 sink tokens, bf16, 2 ranks, $mode)" "$res" \
    "$one_rc / $pair_rc0 / $pair_rc1" "$(( $(date +%s) - t0 ))" \
    "step-20 loss one rank ${one_loss:-missing}, two ranks ${cp_loss:-missing}"
fi

# ---- report -------------------------------------------------------------------------------------
{
  echo "## NCCL without MPI ($(date -u +%FT%TZ))"
  echo ""
  echo "libnccl ${nccl_version:-?}, ${ngpu} GPU(s) visible, build $BUILD, NCCL_DEBUG=$NCCL_DEBUG"
  [ -n "$mode_note" ] && echo "" && echo "Note: $mode_note"
  echo ""
  echo "| part | result | exit codes | seconds | detail |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${summary[@]}"
  fails=$(printf '%s\n' "${summary[@]}" | grep -c '| FAIL')
  if [ "$fails" -gt 0 ]; then
    echo ""
    echo "Failures (last lines of each failing log):"
    echo '```'
    for f in "$REPORT_DIR"/nccl_one_rank.log "$REPORT_DIR"/two_ranks.rank*.log "$REPORT_DIR"/train.rank*.log \
             "$REPORT_DIR"/cp_*.log; do
      [ -f "$f" ] || continue
      if grep -qE 'FAILED|error|Error|failed' "$f"; then
        echo "== $(basename "$f")"
        grep -E 'FAILED|Failure|error|Error|failed|WARN' "$f" | head -12
      fi
    done
    echo '```'
  fi
} | tee -a "$REPORT"
fails=$(printf '%s\n' "${summary[@]}" | grep -c '| FAIL')
exit $(( fails > 0 ? 1 : 0 ))
