#!/usr/bin/env bash
# Packs what a GPU machine lacks for building Horizon into .deps/gpu-deps.tar.xz (ignored by git;
# name `.deps` in the device tool's `carry`). Run here, on the Debian 12 development machine.
#
# A lent GPU machine has nvcc, cuBLAS(Lt), cuDNN, NCCL, CMake, ninja and PyTorch but no apt and no
# yaml-cpp, HDF5, fmt, nlohmann-json, PCRE2, utf8proc, SentencePiece, GoogleTest or MPI. This script downloads Debian's -dev packages (apt-get
# download: no root needed, nothing is installed), keeps their headers and static archives and
# packs them (~4 MB), with cudnn-frontend's headers (scripts/tools/cudnn_frontend.sh). scripts/gpu/gpu_check.sh unpacks them there and configures CMake with
# -DHZ_DEPS_PREFIX=<prefix>, which links those archives (fmt and SentencePiece as shared libraries
# found by rpath, no MPI, portable CPU GEMM), so the build needs nothing else from the machine.
#
#   scripts/gpu/gpu_deps.sh          # idempotent: rebuilds the archive only when missing
#   HZ_FORCE=1 scripts/gpu/gpu_deps.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=.deps/gpu-deps.tar.xz
# cudnn-frontend's headers (cuDNN's fused attention) ride along: an archive without them (or with
# another pinned version) is rebuilt
fe=$(scripts/tools/cudnn_frontend.sh)
# the bundle's layout version: an archive of another layout is rebuilt (2: fmt as a shared library)
layout=2
stamp="$(cat "$fe/../VERSION") layout $layout"
if [ -f "$OUT" ] && [ "${HZ_FORCE:-0}" != "1" ] && [ "$(tar -xJOf "$OUT" ./cudnn-frontend.version 2> /dev/null)" = "$stamp" ]; then
  echo "[gpu_deps] $OUT exists ($(du -h "$OUT" | cut -f1)); HZ_FORCE=1 to rebuild"
  exit 0
fi
PKGS=(libyaml-cpp-dev libfmt-dev libfmt9 libhdf5-dev libhdf5-103-1 libaec-dev libaec0 libsz2 zlib1g-dev
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
# SentencePiece and fmt ship no static archive: their shared libraries (need only glibc >= 2.34 and a
# GCC 11 libstdc++; protobuf-lite is inside SentencePiece's) are linked by full path, found through
# the build's rpath. fmt as a shared library (not header-only) keeps the GPU machine's command lines
# those of the main configuration (FMT_SHARED), so scripts/test.sh builds the two from one cache.
cp -L "$L/libsentencepiece.so.0" "$prefix/lib/libsentencepiece.so.0"
cp -L "$L/libfmt.so.9" "$prefix/lib/libfmt.so.9"
cp -r "$fe"/. "$prefix/include/"
echo "$stamp" > "$prefix/cudnn-frontend.version"
mkdir -p .deps
tar -C "$prefix" -cJf "$OUT" .
echo "[gpu_deps] wrote $OUT ($(du -h "$OUT" | cut -f1)): $(tar -tJf "$OUT" | grep -c '\.a$') static archives"
