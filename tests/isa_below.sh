#!/usr/bin/env bash
# Runs a test binary with the CPU libraries held below this CPU, so that a test whose truth hangs on
# one GEMM kernel's rounding fails here, not on the next person's machine:
#   - oneDNN (f32 products; bf16 with AMX) one instruction set below this CPU's widest
#     (AVX-512 -> AVX2, AVX2 -> AVX, older -> SSE4.1), through ONEDNN_MAX_CPU_ISA;
#   - OpenBLAS (f64 products) on its SSE3 "Prescott" kernel, through OPENBLAS_CORETYPE: the kernel a
#     CPU newer than OpenBLAS's table silently gets (Debian 12's 0.3.21 on an Emerald Rapids Xeon).
# The binary's CpuRuntime.LibrariesHeldWhereAsked case checks that both took (HZ_EXPECT_DNNL_ISA,
# HZ_EXPECT_OPENBLAS_CORE): a library that ignored the cap would otherwise pass silently.
#   tests/isa_below.sh BINARY [ARGS...]
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]]; }
if has avx512f; then isa=AVX2
elif has avx2; then isa=AVX
else isa=SSE41
fi
export ONEDNN_MAX_CPU_ISA=$isa OPENBLAS_CORETYPE=Prescott
export HZ_EXPECT_DNNL_ISA=${isa,,} HZ_EXPECT_OPENBLAS_CORE=Prescott
echo "[isa-below] ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE: $*"
exec "$@"
