#!/usr/bin/env bash
# Builds the test suites and the CLI with AddressSanitizer + UndefinedBehaviorSanitizer in their
# own build directory (build-asan) and runs them through CTest, then the fuzz corpus when a fuzz
# test exists (tests/fuzz: `ctest -R fuzz`). Not part of CI (it takes much longer than a plain
# build); run it before merging parser or run-directory work:
#   scripts/gpu/sanitize.sh [CTEST_REGEX]      e.g. scripts/gpu/sanitize.sh 'hz_test_(train|io)|e2e_runs'
# Configuration: RelWithDebInfo (readable stacks), CUDA off (the sanitizers do not see device
# code), MPI off: OpenMPI's own allocations and its shared-memory transport make ASan/LSan
# reports about the library rather than about Horizon, and the data-parallel code is the same
# host code the one-process suites run; -march=native off so that a report reproduces elsewhere.
# Any sanitizer report fails the test that triggered it (halt_on_error, exit code != 0).
# Environment: HZ_ASAN_DIR (build directory, default build-asan), HZ_JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${HZ_ASAN_DIR:-build-asan}
JOBS=${HZ_JOBS:-2}
FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
start=$(date +%s)

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHZ_CUDA=OFF -DHZ_MPI=OFF -DHZ_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_C_FLAGS="$FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$BUILD" -j "$JOBS"

# detect_leaks: Horizon owns its memory through RAII; a leak report is a finding too.
# (suppressions for third-party libraries, if ever needed: scripts/sanitize.supp via LSAN_OPTIONS)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
if [ -f scripts/sanitize.supp ]; then export LSAN_OPTIONS="suppressions=$PWD/scripts/sanitize.supp"; fi

status=0
cd "$BUILD"
if [ $# -gt 0 ]; then
  ctest --output-on-failure --timeout 3600 -j "$JOBS" -R "$1" || status=$?
else
  ctest --output-on-failure --timeout 3600 -j "$JOBS" || status=$?
  # the fuzz corpus (tests/fuzz, when present) once more on its own, so its result stands out
  if ctest -N -R fuzz | grep -q "Test *#"; then
    echo "[sanitize] fuzz corpus"
    ctest --output-on-failure --timeout 3600 -R fuzz || status=$?
  fi
fi
echo "[sanitize] $( [ $status -eq 0 ] && echo 'no findings' || echo "FAILED (exit $status): see the reports above" ), $(( $(date +%s) - start )) s"
exit $status
