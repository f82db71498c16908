#!/usr/bin/env bash
# scripts/gpu/gpu_check.sh and scripts/gpu/gpu_tests.py without a GPU, against stand-in tools: a fake
# nvidia-smi, cmake (configure and build write stand-in binaries), compute-sanitizer (runs the
# program, prints a clean summary) and gtest binaries (tests/gpu_check/fake_gtest.py) with a
# faulting case (poisons the cases after it), a crashing one, a hanging one, a failure, a skip, CPU
# cases that the GPU filter must leave out, and a binary that does not load. Checks:
#   1. the session preset's order: correctness first (tests, NCCL, racecheck, memcheck, lab), then
#      the benchmarks;
#   2. isolation and counting: every case ends in exactly one state, once; the cases after the
#      fault are rerun and counted once; each culprit is rerun alone with CUDA_LAUNCH_BLOCKING=1;
#      the CPU cases never run; the binary that does not load has a row saying why;
#   3. a second session call on the same machine builds nothing (same source hash) and reruns no
#      finished stage;
#   4. the deadline: a hang that outlives it ends the command in time, its case "not run", the
#      stages after it skipped and the stage not recorded as finished;
#   5. $OUT holds at most 2 files after every call;
#   6. (given the build folder as $1) no test binary outside the check's list has a CUDA case.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/hz_gpu_check_test.XXXXXX)
trap '[ "${HZ_KEEP:-0}" = 1 ] || rm -rf "$W"' EXIT
fail=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
mkdir -p "$W/bin" "$W/cases"

# ---- stand-in tools ----------------------------------------------------------------------------
cat > "$W/bin/nvidia-smi" <<'X'
#!/usr/bin/env bash
echo "Stand-in GPU, 0.0, 81559 MiB, 1980 MHz"
X
cat > "$W/bin/compute-sanitizer" <<'X'
#!/usr/bin/env bash
[ "${1:-}" = --version ] && { echo "Version 0.0 (stand-in)"; exit 0; }
tool=memcheck
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --error-exitcode|--print-limit) shift 2 ;;
    --*) shift ;;
    *) break ;;
  esac
done
"$@"; rc=$?
if [ "$tool" = racecheck ]; then echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
else echo "========= ERROR SUMMARY: 0 errors"; fi
exit $rc
X
cat > "$W/bin/cmake" <<X
#!/usr/bin/env bash
# stand-in cmake: configure writes a cache, --build installs stand-in binaries, -N -L lists the cache
log=$W/cmake.log
X
cat >> "$W/bin/cmake" <<'X'
[ "${1:-}" = --version ] && { echo "cmake version 0.0 (stand-in)"; exit 0; }
if [ "${1:-}" = --build ]; then
  dir=$2; shift 2
  targets=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --target) shift; while [ $# -gt 0 ] && [[ "$1" != -* ]]; do targets+=("$1"); shift; done ;;
      --) break ;;
      *) shift ;;
    esac
  done
  for t in "${targets[@]}"; do
    echo "build $t" >> "$log"; echo "[1/1] Linking $t"
    case "$t" in
      hz_test_*) cp "$HZ_FAKE_SRC/tests/gpu_check/fake_gtest.py" "$dir/$t"; : > "$dir/$t.cases"
                 [ -f "$HZ_FAKE_CASES/$t.cases" ] && cp "$HZ_FAKE_CASES/$t.cases" "$dir/"
                 [ -f "$HZ_FAKE_CASES/$t.noload" ] && cp "$HZ_FAKE_CASES/$t.noload" "$dir/" ;;
      *) printf '#!/usr/bin/env bash\n[ "${1:-}" = info ] && echo "0 device(s) visible"\necho "stand-in %s $*"\n' "$t" > "$dir/$t" ;;
    esac
    chmod +x "$dir/$t"
  done
  exit 0
fi
dir=""; list=0
while [ $# -gt 0 ]; do
  case "$1" in -B) dir=$2; shift 2 ;; -N|-L) list=1; shift ;; *) shift ;; esac
done
if [ $list = 1 ]; then echo "NCCL_LIBRARY:FILEPATH=/stand-in/libnccl.so.2"; exit 0; fi
echo "configure $dir" >> "$log"
mkdir -p "$dir"
printf 'HZ_NCCL:BOOL=ON\nHZ_KERNEL_LAB:BOOL=ON\n' > "$dir/CMakeCache.txt"
X
chmod +x "$W/bin/"*
cat > "$W/cases/hz_test_core.cases" <<'X'
CudaA.p1 pass
CudaA.p2 pass
CudaA.f1 fault
CudaA.p3 pass
CudaB.c1 crash
CudaB.p4 pass
CudaB.s1 skip
CudaB.x1 fail
CudaC.h1 hang
CudaC.p5 pass
Cpu.q1 pass
MixedPrecision.m1 pass
X
echo "FusedCuda.a1 pass" > "$W/cases/hz_test_attention.cases"
echo "CudaKV.n1 pass" > "$W/cases/hz_test_nn.cases"
touch "$W/cases/hz_test_nn.noload"
mkdir -p "$W/deps/lib" && touch "$W/deps/lib/libhdf5_serial.a" && tar -C "$W/deps" -cJf "$W/deps.tar.xz" .

run() {  # run OUTDIR STATE DEADLINE IDLE STAGE...
  local out=$1 state=$2 deadline=$3 idle=$4; shift 4
  mkdir -p "$out"
  PATH="$W/bin:$PATH" OUT="$out" HZ_FAKE_SRC="$SRC" HZ_FAKE_CASES="$W/cases" HZ_GPU_BUILD="$W/build" \
    HZ_GPU_STATE="$state" HZ_GPU_LOGS="$W/logs" HZ_GPU_DEPS="$W/deps.tar.xz" HZ_GPU_DEPS_DIR="$W/depsdir" \
    HZ_GPU_DEADLINE="$deadline" HZ_GPU_IDLE="$idle" HZ_GPU_JOBS=1 HZ_GPU_FLEX_T= \
    "$SRC/scripts/gpu/gpu_check.sh" "$@" > "$out.console" 2>&1
}
files_at_most_2() { [ "$(find "$1" -type f | wc -l)" -le 2 ]; }

# ---- 1, 2, 5: a session ------------------------------------------------------------------------
run "$W/out1" "$W/state" 240 2 session
R=$W/out1/gpu_report.md
order=$(grep -E '^## ' "$R" | sed 's/^## //' | cut -c1-20 | tr '\n' '|')
expected='preflight|build|tests (the CUDA case|NCCL|NCCL without MPI (|compute-sanitizer ra|compute-sanitizer me|kernel lab (dev/cuda|training throughput |fused attention vs P|attention sinks and |'
check "session order: correctness first, then benchmarks ($order)" [ "${order//[0-9T:Z-]/}" = "${expected//[0-9T:Z-]/}" ]
row=$(grep '^| hz_test_core |' "$R")
check "core counts once per case: 10 cases, 5 passed, 1 failed, 1 skipped, 1 fault, 1 crashed, 1 hung ($row)" \
  bash -c "echo '$row' | grep -q '^| hz_test_core | 10 | 5 | 1 | 1 | 1 | 1 | 1 | 0 |'"
check "the binary that does not load has a row that names the library" \
  grep -q '^| hz_test_nn | 0 |.*does not load: .*libcublasLt.so.13' "$R"
check "the attention suite passed" grep -q '^| hz_test_attention | 1 | 1 | 0 |' "$R"
ran=$W/build/hz_test_core.ran
check "CPU cases never ran under the GPU filter" bash -c "! grep -qE '^(Cpu|MixedPrecision)\.' '$ran'"
check "the cases after the fault ran again (p3 twice), the others once (p1)" \
  bash -c "[ \$(grep -cx 'CudaA.p3' '$ran') = 2 ] && [ \$(grep -cx 'CudaA.p1' '$ran') = 1 ]"
for c in CudaA.f1 CudaB.c1 CudaC.h1; do
  check "culprit $c rerun alone with CUDA_LAUNCH_BLOCKING=1" grep -qx "$c blocking" "$ran"
done
check "the report names each culprit" bash -c "grep -q '^fault: hz_test_core CudaA.f1' '$R' && grep -q '^crashed: hz_test_core CudaB.c1' '$R' && grep -q '^hung: hz_test_core CudaC.h1' '$R'"
check "racecheck's clean summary counts no error" grep -q 'racecheck, hz_test_attention .*summary 0, kernel errors 0' "$R"
check "\$OUT holds at most 2 files (session)" files_at_most_2 "$W/out1"
check "the logs come back packed" tar -tzf "$W/out1/gpu_logs.tar.gz" ./gpu_results.json

# ---- 3: the same machine again -----------------------------------------------------------------
configures=$(grep -c '^configure' "$W/cmake.log")
run "$W/out2" "$W/state" 240 2 session
check "a second call reuses the build (unchanged sources)" grep -q 'build: unchanged sources' "$W/out2/gpu_report.md"
check "... and configures nothing" [ "$(grep -c '^configure' "$W/cmake.log")" = "$configures" ]
check "... and reruns no finished stage" grep -q '^(finished by an earlier call on this machine: test nccl racecheck memcheck lab' "$W/out2/gpu_report.md"
check "\$OUT holds at most 2 files (second call)" files_at_most_2 "$W/out2"

# ---- 4: a hang that outlives the deadline ------------------------------------------------------
t0=$(date +%s)
run "$W/out3" "$W/state3" 75 600 test nccl
took=$(( $(date +%s) - t0 ))
R=$W/out3/gpu_report.md
check "the command ends inside its 75 s deadline (took ${took} s)" [ "$took" -le 77 ]
check "the hung case is not run (deadline), nothing after it counted as passed" \
  bash -c "grep '^| hz_test_core |' '$R' | grep -qE '^\| hz_test_core \| 10 \| [0-9]+ \| 1 \| 1 \| 1 \| 1 \| 0 \| [1-9]'"
check "the stage after it is skipped, saying so" grep -q '^- \*\*NCCL skipped\*\*' "$R"
check "the cut stage is not recorded as finished" bash -c "! grep -qx test '$W/state3/done'"
check "\$OUT holds at most 2 files (deadline)" files_at_most_2 "$W/out3"

# ---- the suites the GPU check builds are every suite with a CUDA case ---------------------------
# (with the project's build folder as $1: every other test binary lists no case under the filter)
if [ -n "${1:-}" ]; then
  suites=$(grep -oE '^SUITES=\(.*\)' "$SRC/scripts/gpu/gpu_check.sh" | sed 's/SUITES=(//; s/)//')
  filter=$(grep -oE "^GPU_FILTER='[^']*'" "$SRC/scripts/gpu/gpu_check.sh" | sed "s/GPU_FILTER=//; s/'//g")
  others=""
  for b in "$1"/hz_test_*; do
    [ -x "$b" ] || continue
    s=${b##*/hz_test_}
    [[ " $suites " == *" $s "* ]] && continue
    n=$("$b" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -c '^  ' || true)
    [ "${n:-0}" -gt 0 ] && others="$others $s($n)"
  done
  check "every suite with CUDA cases is built and run by the GPU check (others with cases:${others:- none})" [ -z "$others" ]
fi

if [ $fail != 0 ]; then
  echo "--- report of the session call:"; cat "$W/out1/gpu_report.md"
  echo "--- report of the deadline call:"; cat "$W/out3/gpu_report.md"
fi
exit $fail
