#!/usr/bin/env bash
# Installs Horizon's system dependencies (Debian 12, apt) and builds build/ (horizon and the tests).
# Idempotent: packages already present are skipped, the build is incremental.
# Environment: HZ_BUILD_DIR (default build), HZ_CMAKE_ARGS (extra -D options), HZ_JOBS (default 2),
# HZ_TARGETS (build only these targets; default all), HZ_SETUP_PACKAGES_ONLY=1 (the packages, no build).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev
      libopenblas-openmp-dev libopenmpi-dev openmpi-bin libhdf5-dev libyaml-cpp-dev libfmt-dev libdnnl-dev
      zlib1g-dev libcrypt-dev python3-h5py python3-matplotlib python3-venv)
# tokenizers: pre-tokenizer regexes, Unicode properties and normalization, tokenizer.json / JSONL, .model files
PKGS+=(libpcre2-dev libutf8proc-dev nlohmann-json3-dev libsentencepiece-dev)
# TensorBoard event files (io/tensorboard.h): protobuf messages, records framed with CRC32C (ISA-L)
PKGS+=(protobuf-compiler libprotobuf-dev libisal-dev)
# scripts/gpu/gpu_deps.sh packs the GPU machine's dependencies with xz; ccache: the build folders of a
# checkout share their compiled units (CMakeLists.txt, HZ_CCACHE)
PKGS+=(xz-utils ccache)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "[setup] system packages present"
fi

# cuDNN's fused attention: cudnn-frontend's headers (PyPI), where a CUDA build will be configured
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/tools/cudnn_frontend.sh > /dev/null
fi
[ "${HZ_SETUP_PACKAGES_ONLY:-0}" = "1" ] && exit 0  # scripts/test.sh: the packages first, then the venv beside the build

BUILD_DIR=${HZ_BUILD_DIR:-build}
JOBS=${HZ_JOBS:-2}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${HZ_CMAKE_ARGS:-}
fi
# shellcheck disable=SC2086  # HZ_TARGETS is a word list
cmake --build "$BUILD_DIR" -j "$JOBS" ${HZ_TARGETS:+--target $HZ_TARGETS}
echo "[setup] built $BUILD_DIR/${HZ_TARGETS:+: $HZ_TARGETS}"
