#!/usr/bin/env bash
# Sets up (apt + build, via scripts/setup.sh) and runs every test through CTest.
# Also builds a second, portable configuration (no OpenBLAS, no oneDNN, no CUDA, no MPI) and runs the
# numerical suites on it, so the fallback GEMM and the CPU-only build stay honest; and a third, the
# GPU machine's (scripts/gpu/gpu_check.sh), so that it compiles and links before a GPU session needs it.
# Idempotent; each test is bounded by a CTest timeout. Set HZ_SKIP_PORTABLE=1 to skip the
# portable configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

# the kernel lab (dev/cuda/, built only on demand) too, so a change to the kernels' interface that
# breaks it fails here rather than on a GPU machine (no-op without CUDA)
HZ_CMAKE_ARGS="-DHZ_KERNEL_LAB=ON ${HZ_CMAKE_ARGS:-}" scripts/setup.sh
# the tests that read Horizon's outputs with the libraries defining their formats (tensorboard) and
# run its Hugging Face exports (PyTorch, transformers, lm-eval-harness) run here, from a venv of
# current PyPI releases, instead of being skipped (about 3 GB, 2 minutes to install the first time)
HZ_TEST_PYTHON=$(HZ_VENV="${HZ_BUILD_DIR:-build}/test-venv" \
  HZ_VENV_PKGS="tensorboard torch transformers safetensors accelerate lm-eval=lm_eval" scripts/tools/venv.sh)
export HZ_TEST_PYTHON HZ_REQUIRE_PYPI=1
(cd "${HZ_BUILD_DIR:-build}" && ctest --output-on-failure --timeout 900 -j "${HZ_JOBS:-2}")

if [ "${HZ_SKIP_PORTABLE:-0}" != "1" ]; then
  echo "[test] portable configuration: HZ_OPENBLAS=OFF HZ_DNNL=OFF HZ_CUDA=OFF HZ_MPI=OFF"
  HZ_BUILD_DIR=build-portable HZ_CMAKE_ARGS="-DHZ_OPENBLAS=OFF -DHZ_DNNL=OFF -DHZ_CUDA=OFF -DHZ_MPI=OFF" \
    HZ_TARGETS="horizon hz_test_core hz_test_autograd hz_test_attention hz_test_nn hz_test_optim" scripts/setup.sh
  # the suites whose code paths differ without OpenBLAS, oneDNN or CUDA (GEMM, kernels, gradients, models)
  (cd build-portable && ctest --output-on-failure --timeout 900 -j "${HZ_JOBS:-2}" \
     -R '^(hz_test_(core|autograd|attention|nn|optim)|cli_help|cli_info)$')
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
  { read -r cfg; read -r targets; } < <(scripts/gpu/gpu_check.sh print-build)
  HZ_BUILD_DIR=build-device HZ_CMAKE_ARGS="$cfg -DHZ_DEPS_PREFIX=$deps" HZ_TARGETS="$targets" scripts/setup.sh
  build-device/horizon info > /dev/null
  for t in $targets; do
    case "$t" in hz_test_*) [ -x "build-device/$t" ] && "build-device/$t" --gtest_list_tests > /dev/null ;; esac
  done
  echo "[test] the GPU machine's configuration builds, and its binaries load"
fi
echo "[test] total time: $(( $(date +%s) - start )) s"
