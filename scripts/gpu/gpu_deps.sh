#!/usr/bin/env bash
# Packs what a GPU machine lacks for building Horizon into .deps/gpu-deps.tar.xz (ignored by git;
# name `.deps` in the device tool's `carry`). Run here, on the Debian 12 development machine.
#
# A lent GPU machine has nvcc, cuBLAS(Lt), cuDNN, NCCL, CMake, ninja and PyTorch but no apt and no
# yaml-cpp, HDF5, fmt, nlohmann-json, PCRE2, utf8proc, SentencePiece, GoogleTest or MPI. This script downloads Debian's -dev packages (apt-get
# download: no root needed, nothing is installed), keeps their headers and static archives and
# packs them (~7 MB), with cudnn-frontend's headers (scripts/tools/cudnn_frontend.sh). scripts/gpu/gpu_check.sh unpacks them there and configures CMake with
# -DHZ_DEPS_PREFIX=<prefix>, which links those archives (fmt header-only, no MPI, portable CPU
# GEMM), so the build needs nothing else from the machine.
#
#   scripts/gpu/gpu_deps.sh          # idempotent: rebuilds the archive only when missing
#   HZ_FORCE=1 scripts/gpu/gpu_deps.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=.deps/gpu-deps.tar.xz
# cudnn-frontend's headers (cuDNN's fused attention) ride along: an archive without them (or with
# another pinned version) is rebuilt
fe=$(scripts/tools/cudnn_frontend.sh)
fe_version=$(cat "$fe/../VERSION")
if [ -f "$OUT" ] && [ "${HZ_FORCE:-0}" != "1" ] && [ "$(tar -xJOf "$OUT" ./cudnn-frontend.version 2> /dev/null)" = "$fe_version" ]; then
  echo "[gpu_deps] $OUT exists ($(du -h "$OUT" | cut -f1)); HZ_FORCE=1 to rebuild"
  exit 0
fi
PKGS=(libyaml-cpp-dev libfmt-dev libhdf5-dev libhdf5-103-1 libaec-dev libaec0 libsz2 zlib1g-dev
      libgtest-dev libgmock-dev nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libutf8proc-dev
      libsentencepiece-dev libsentencepiece0)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${PKGS[@]}" >/dev/null)
mkdir -p "$work/x"
for d in "$work"/*.deb; do dpkg -x "$d" "$work/x"; done
prefix="$work/prefix"
mkdir -p "$prefix/include" "$prefix/lib"
X="$work/x/usr"
cp -r "$X/include/yaml-cpp" "$X/include/fmt" "$X/include/gtest" "$X/include/gmock" "$X/include/nlohmann" "$prefix/include/"
mkdir -p "$prefix/include/hdf5"
cp -r "$X/include/hdf5/serial" "$prefix/include/hdf5/"
cp "$X/include/pcre2.h" "$X/include/utf8proc.h" "$X/include/sentencepiece_processor.h" "$prefix/include/"
cp "$X/include/zlib.h" "$X/include/zconf.h" "$prefix/include/"  # data/corpus.cpp inflates the embedded Bible
cp "$X/include/libaec.h" "$X/include/szlib.h" "$prefix/include/" 2>/dev/null || true
L="$X/lib/x86_64-linux-gnu"
for a in libyaml-cpp.a libhdf5_serial.a libaec.a libsz.a libz.a libgtest.a libgtest_main.a libgmock.a \
         libpcre2-8.a libutf8proc.a; do
  cp "$L/$a" "$prefix/lib/"
done
# SentencePiece ships no static archive: its shared library (needs only glibc >= 2.34 and a GCC 11
# libstdc++; protobuf-lite is inside it) is linked by full path, found through the build's rpath
cp -L "$L/libsentencepiece.so.0" "$prefix/lib/libsentencepiece.so.0"
cp -r "$fe"/. "$prefix/include/"
echo "$fe_version" > "$prefix/cudnn-frontend.version"
mkdir -p .deps
tar -C "$prefix" -cJf "$OUT" .
echo "[gpu_deps] wrote $OUT ($(du -h "$OUT" | cut -f1)): $(tar -tJf "$OUT" | grep -c '\.a$') static archives"
