#!/usr/bin/env bash
# Sets up (apt + build, via scripts/setup.sh) and runs every test through CTest.
# Also builds a second, portable configuration (no OpenBLAS, no oneDNN, no CUDA, no MPI) and runs the
# numerical suites on it, so the fallback GEMM and the CPU-only build stay honest; and a third, the
# GPU machine's (scripts/gpu/gpu_check.sh), so that it compiles and links before a GPU session needs it.
# The three share one compiler cache (.ccache/, CMakeLists.txt's HZ_CCACHE): a unit whose command
# line is the same in two of them compiles once. The numerical suites also run with the CPU
# libraries held below this CPU's instruction set (CTest's *_isa_below, tests/isa_below.sh).
# Idempotent; each test is bounded by a CTest timeout. Set HZ_SKIP_PORTABLE=1 to skip the
# portable configuration. A quicker loop while working: (cd build && ctest -L unit), or -LE pypi
# (labels: unit, isa, mpi, e2e, pypi, fuzz; CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
mark() { echo "[test] $1: $(( $(date +%s) - start )) s"; }
BUILD=${HZ_BUILD_DIR:-build}

HZ_SETUP_PACKAGES_ONLY=1 scripts/setup.sh
# the tests that read Horizon's outputs with the libraries defining their formats (tensorboard) and
# run its Hugging Face exports (PyTorch, transformers, lm-eval-harness) run here, from a venv of
# current PyPI releases, instead of being skipped (about 3 GB; downloaded and unpacked while the
# build below keeps the cores busy)
mkdir -p "$BUILD"
HZ_VENV="$BUILD/test-venv" HZ_VENV_PKGS="tensorboard torch transformers safetensors accelerate lm-eval=lm_eval" \
  scripts/tools/venv.sh > "$BUILD/test-venv.python" 2> "$BUILD/test-venv.log" &
venv=$!
# (the kernel lab, dev/cuda/, is built by the GPU machine's configuration below, with sm_90, so a
# change to the kernels' interface that breaks it fails here rather than on a GPU machine)
scripts/setup.sh
mark "main build"
wait "$venv" || { cat "$BUILD/test-venv.log"; echo "[test] the test venv failed ($BUILD/test-venv.log)"; exit 1; }
HZ_TEST_PYTHON=$(cat "$BUILD/test-venv.python")
mark "test venv"
export HZ_TEST_PYTHON HZ_REQUIRE_PYPI=1
# gpu_check_standin waits most of its minute (the GPU check's deadline against a stand-in hang, 9 s of
# CPU): it runs beside the portable and GPU configurations' builds below instead of holding one of
# CTest's slots here
(cd "$BUILD" && ctest --output-on-failure --timeout 900 -j "${HZ_JOBS:-2}" -E '^gpu_check_standin$')
mark "main configuration's tests"
(cd "$BUILD" && ctest --output-on-failure --timeout 900 -R '^gpu_check_standin$' > gpu_check_standin.log 2>&1) &
standin=$!

if [ "${HZ_SKIP_PORTABLE:-0}" != "1" ]; then
  echo "[test] portable configuration: HZ_OPENBLAS=OFF HZ_DNNL=OFF HZ_CUDA=OFF HZ_MPI=OFF"
  HZ_BUILD_DIR=build-portable HZ_CMAKE_ARGS="-DHZ_OPENBLAS=OFF -DHZ_DNNL=OFF -DHZ_CUDA=OFF -DHZ_MPI=OFF" \
    HZ_TARGETS="horizon hz_test_core hz_test_autograd hz_test_attention hz_test_nn hz_test_optim" scripts/setup.sh
  # the suites whose code paths differ without OpenBLAS, oneDNN or CUDA (GEMM, kernels, gradients, models);
  # not the tensor-core kernels' emulator (host code that calls no library: the main run covers it)
  (cd build-portable && GTEST_FILTER='-MmaEmulator*' ctest --output-on-failure --timeout 900 -j "${HZ_JOBS:-2}" \
     -R '^(hz_test_(core|autograd|attention|nn|optim)|cli_help|cli_info)$')
  mark "portable configuration"
fi
# The GPU machine's configuration (scripts/gpu/gpu_check.sh): the bundled dependencies from .deps
# (static archives, SentencePiece by rpath), no MPI, no OpenBLAS, CUDA, the lab, built here so that
# a compile or link error in it shows in CI, not in a GPU session's first minutes; its binaries must
# load and list their cases. Needs nvcc; HZ_SKIP_DEVICE=1 skips it.
if [ "${HZ_SKIP_DEVICE:-0}" != "1" ] && { command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  echo "[test] the GPU machine's configuration (scripts/gpu/gpu_check.sh print-build)"
  scripts/gpu/gpu_deps.sh
  deps=$PWD/build-device/deps
  if [ ! -f "$deps/.from" ] || [ "$(cat "$deps/.from")" != "$(sha256sum < .deps/gpu-deps.tar.xz)" ]; then
    rm -rf "$deps" && mkdir -p "$deps" && tar -xJf .deps/gpu-deps.tar.xz -C "$deps"
    sha256sum < .deps/gpu-deps.tar.xz > "$deps/.from"
  fi
  # The bundle's headers are Debian's -dev packages' (scripts/gpu/gpu_deps.sh): when each one is this
  # machine's copy byte for byte (or cudnn-frontend's in .deps/), the build reads this machine's copies,
  # so its command lines are the main configuration's and the compiler cache serves those units; it
  # still links the bundle's archives and libraries, as the GPU machine does.
  headers=$deps/include
  root=$PWD
  if (cd "$deps/include" && find . -type f -print0 | while IFS= read -r -d '' f; do
        cmp -s "$f" "/usr/include/$f" || cmp -s "$f" "$root/.deps/cudnn-frontend/include/$f" || exit 1
      done); then
    headers=/usr/include
  else
    echo "[test] the bundle's headers differ from this machine's: the GPU machine's configuration compiles them (no cache sharing)"
  fi
  { read -r cfg; read -r targets; } < <(scripts/gpu/gpu_check.sh print-build)
  HZ_BUILD_DIR=build-device HZ_CMAKE_ARGS="$cfg -DHZ_DEPS_PREFIX=$deps -DHZ_DEPS_INCLUDE=$headers" HZ_TARGETS="$targets" scripts/setup.sh
  build-device/horizon info > /dev/null
  for t in $targets; do
    case "$t" in hz_test_*) [ -x "build-device/$t" ] && "build-device/$t" --gtest_list_tests > /dev/null ;; esac
  done
  mark "the GPU machine's configuration builds, and its binaries load"
fi
wait "$standin" || { cat "$BUILD/gpu_check_standin.log"; echo "[test] gpu_check_standin failed"; exit 1; }
mark "gpu_check_standin (beside the builds above)"
mark "total time"
