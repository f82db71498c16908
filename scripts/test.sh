#!/usr/bin/env bash
# Sets up (apt + build, via scripts/setup.sh) and runs every test through CTest.
# Also builds a second, portable configuration (no OpenBLAS, no CUDA, no MPI) and runs the
# numerical suites on it, so the fallback GEMM and the CPU-only build stay honest.
# Idempotent; each test is bounded by a CTest timeout. Set HZ_SKIP_PORTABLE=1 to skip the
# portable configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

# the kernel lab (dev/cuda/, built only on demand) too, so a change to the kernels' interface that
# breaks it fails here rather than on a GPU machine (no-op without CUDA)
HZ_CMAKE_ARGS="-DHZ_KERNEL_LAB=ON ${HZ_CMAKE_ARGS:-}" scripts/setup.sh
(cd "${HZ_BUILD_DIR:-build}" && ctest --output-on-failure --timeout 900 -j "${HZ_JOBS:-2}")

if [ "${HZ_SKIP_PORTABLE:-0}" != "1" ]; then
  echo "[test] portable configuration: HZ_OPENBLAS=OFF HZ_CUDA=OFF HZ_MPI=OFF"
  HZ_BUILD_DIR=build-portable HZ_CMAKE_ARGS="-DHZ_OPENBLAS=OFF -DHZ_CUDA=OFF -DHZ_MPI=OFF" \
    scripts/setup.sh
  # the suites whose code paths differ without OpenBLAS / CUDA (GEMM, kernels, gradients, models)
  (cd build-portable && ctest --output-on-failure --timeout 900 -j "${HZ_JOBS:-2}" \
     -R '^(hz_test_(core|autograd|attention|nn|optim)|cli_help|cli_info)$')
fi
echo "[test] total time: $(( $(date +%s) - start )) s"
