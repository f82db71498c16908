#!/usr/bin/env bash
# Register budget of the tensor-core attention kernels (CTest: attention_kernel_registers; needs a
# CUDA build, no GPU). Reads ptxas's report (-Xptxas=-v) of attention/cuda/attn_mma.cu (the plain
# variant) and attn_mma_general.cu (the general one: chunks, sink tokens, a prefix, token positions,
# GRAPE's rates; mma_body.h), which the build keeps from its own compile of them
# (scripts/cmake/ptxas_report.sh), prints registers and spill bytes per kernel and fails when a
# kernel spills past its budget. A spill store or load goes to local memory (L1/L2): inside the
# main loop of a kernel that is bound by its mma.sync rate it costs more than the arithmetic it
# saves, and nothing else shows it without a GPU.
#   tests/kernel_registers.sh DIR ARCH   (DIR: the build's ptxas/ folder; ARCH: the build's
#                                         CMAKE_CUDA_ARCHITECTURES, e.g. 90)
# Budgets (bytes of spill stores, sm_90, nvcc 13.0), kernel<D, ..., kGen, kSplit>:
#   plain: forward, dQ, dK/dV at D 64 (with and without FoX)  0
#   plain: dK/dV at D 128 without FoX                         64  (36 measured; 8 before FoX
#                                                                  joined the kernels)
#   plain: dK/dV at D 128 with FoX (key sums, c_j in the loop) 320 (264 measured)
#   general: forward at D 128, dQ and dK/dV at D 64            0
#   general: forward at D 64 (two m-tiles of rows, each row's
#            sink interval and position in registers)          256 (200 measured; 112 with ALiBi's
#                                                                  term folded into the additive
#                                                                  one, which rounds differently
#                                                                  from the plain forward)
#   general: dQ at D 128                                       64  (44 measured; 16 before GRAPE's
#                                                                  row sums joined)
#   general: dK/dV at D 128 (FoX at run time, sink rows and
#            the keys' positions, GRAPE's rates)                600 (492 measured)
# The split kernels (f32 inputs as bf16 pairs: a second fragment per operand), kSplit = true:
#   forward at D 64 and 128, dQ at D 64 and 128 (plain), dK/dV at D 64 with FoX, general dQ and
#   dK/dV at D 64                                              0
#   plain: dK/dV at D 64 without FoX                           96  (64 measured)
#   plain: dK/dV at D 128 (32-row query steps), without / with
#          FoX                                                 320 / 96 (248 / 64 measured; 16-row
#                                                                  steps: 112 / 24)
#   general: forward at D 128                                  64  (28 measured)
#   general: dQ at D 128                                       96  (68 measured)
#   general: dK/dV at D 128                                    320 (232 measured)
# The one-pass backward (dK/dV with dQ, dkvq_kernel<D, kBq, kSplit, false, kWg, kRows>; plain
# variant; the kernel lab's atomic version, kAtomic = true, is built in the lab only), on mma.sync,
# without / with FoX's rows' sums and LogN's key sums (kRows):
#   bf16 at D 64                                               0 / 0
#   bf16 at D 128 (dQ in 32-column chunks beside dK and dV)    240 / 560 (164 / 412 measured; the
#                                                                  two-pass FoX dK/dV: 264)
#   split at D 64                                              32 / 32 (16 / 0 measured)
#   split at D 128 (32-row steps)                              240 / 240 (164 / 128 measured)
# and the general variant's (kGen, the last argument; without / with kRows, which holds FoX's and
# GRAPE's rows' sums there), opt-in like the rest:
#   bf16 at D 64                                               260 (48 / 188 measured)
#   bf16 at D 128                                              900 / 1150 (672 / 892 measured; the
#                                                                  general two-pass dK/dV: 492)
#   split at D 64 / D 128                                      280 / 560 (60-216 / 332-432 measured)
# The kernels on Hopper's wgmma (attn_wgmma.cu and attn_wgmma_general.cu, sm_90a; no B fragments in
# registers: the tensor cores read the tiles from shared memory), fwd_wg_kernel<D, kMT, kGen, kOverlap, kWG>,
# dq_wg_kernel<D, kGen>, dkv_wg_kernel<D, kFox, kGen>:
#   plain: forward at D 64 (two 64-row m-tiles) and 128, dQ, dK/dV at D 64   0
#   the forward with the intra-warpgroup overlap (kOverlap; one m-tile per thread, two
#   warpgroups), both variants and head dims                   0   (218-255 registers; two
#                                                                  m-tiles per thread at D 64: 204 B)
#   the warp-specialised forward, fwd_ws_kernel<D, kGen> (plain variant; setmaxnreg: 232
#   registers for the consumers, 48 for the producer; ptxas reports the 168 at entry)  0
#   plain: dK/dV at D 128, without / with FoX                   160 / 160 (104 / 112 measured; the
#                                                                  mma.sync kernel: 36 / 264)
#   general: forward at D 128, dQ and dK/dV at D 64             0
#   general: forward at D 64 (without the overlap)             256 (100 measured; mma.sync: 196)
#   general: dQ at D 128                                        64  (28 measured; mma.sync: 44)
#   general: dK/dV at D 128                                     1100 (900 measured; mma.sync: 492)
#   the one-pass backward (kWg = true) at D 64, without / with kRows          0 / 0
#   the one-pass backward at D 128, without / with kRows        160 / 280 (112 / 204 measured;
#                                                                  mma.sync: 164 / 412)
#   the general variant's one pass at D 64 / D 128              260 / 1150 (12-200 / 736-916 measured)
# The general variant pays its spills only on calls that have what it adds.
# And no wgmma kernel may have its wgmma serialized by ptxas (its "Potential Performance Loss:
# wgmma.mma_async instructions are serialized" note, C7514 and kin: registers of a product in flight
# read or written before its wait, as ptxas sees the code): the products would then wait for each
# other and the overlap the kernel is written for would not happen, silently. No other "Potential
# Performance Loss" either (a setmaxnreg ptxas ignores, C7508, a warning the report keeps).
# The D 128 dK/dV keeps 128 accumulator registers per thread (dK and dV) plus the 64 of the
# scores and dP, so it sits at the 255-register limit; FoX is a template argument of that kernel
# so a run without FoX pays nothing for it.
set -u
DIR=${1:?usage: kernel_registers.sh DIR ARCH}
ARCH=${2:-90}
ARCH=${ARCH%%;*}     # the first architecture of a list
ARCH=${ARCH%%-*}     # 90-real -> 90
ARCH=${ARCH//a/}     # 90a -> 90 (the budget is the same)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the plain variant (attn_mma.cu) and the general one (attn_mma_general.cu); with sm_90 the forward
# on Hopper's wgmma too (attn_wgmma.cu and attn_wgmma_general.cu, built for sm_90a)
files="attn_mma attn_mma_general"
expect=44
if [ "$ARCH" = 90 ]; then
  files="$files attn_wgmma attn_wgmma_general"
  expect=72
fi
: > "$tmp/ptxas.txt"
for f in $files; do
  if [ ! -s "$DIR/$f.cu.txt" ]; then
    echo "kernel_registers: no ptxas report $DIR/$f.cu.txt (build hz_attention with CUDA first)"
    exit 1
  fi
  cat "$DIR/$f.cu.txt" >> "$tmp/ptxas.txt"
done
# ptxas prints, per entry function: "Compiling entry function 'NAME' for 'sm_90'", then
# "N bytes stack frame, S bytes spill stores, L bytes spill loads", then "Used R registers, ..."
# (one report per architecture of the build: the first one's is read)
awk -v arch="$ARCH" '
  /Compiling entry function/ { match($0, /'\''[^'\'']+'\''/); name = substr($0, RSTART + 1, RLENGTH - 2)
                               keep = index($0, "'\''sm_" arch) > 0 }
  /bytes spill stores/ { for (i = 1; i <= NF; ++i) { if ($(i+1) == "bytes" && $(i+2) == "spill" && $(i+3) == "stores,") st = $i; if ($(i+1) == "bytes" && $(i+2) == "spill" && $(i+3) == "loads") ld = $i } }
  /Used [0-9]+ registers/ { for (i = 1; i <= NF; ++i) if ($(i+1) == "registers,") reg = $i; if (keep) print name, reg, st, ld }
' "$tmp/ptxas.txt" > "$tmp/kernels.txt"
fail=0
n=0
printf '%-36s %9s %13s %12s %8s\n' kernel registers "spill stores" "spill loads" budget
while read -r mangled reg st ld; do
  name=$(echo "$mangled" | c++filt | sed -E 's/^void hz::attn::mma::([a-z_]+<[^>]*>).*/\1/')
  case "$name" in
    *dot_kernel*|*split_rows_kernel*|*sink_rows_kernel*|*visit_map_kernel*) continue ;;  # D_i = dO . O, the f32 split, the sinks' rows: no tile
    "dkv_kernel<128, 64, false, false, false>") budget=64 ;;
    "dkv_kernel<128, 64, true, false, false>") budget=320 ;;
    "fwd_kernel<64, 2, true, false>") budget=256 ;;
    "dq_kernel<128, true, false>") budget=64 ;;
    "dkv_kernel<128, 64, false, true, false>") budget=600 ;;
    "dkv_kernel<64, 64, false, false, true>") budget=96 ;;
    "dkv_kernel<128, 32, false, false, true>") budget=320 ;;
    "dkv_kernel<128, 32, true, false, true>") budget=96 ;;
    "fwd_kernel<128, 1, true, true>") budget=64 ;;
    "dq_kernel<128, true, true>") budget=96 ;;
    "dkv_kernel<128, 32, false, true, true>") budget=320 ;;
    "dkvq_kernel<128, 64, false, false, false, false, false>"|"dkvq_kernel<128, 32, true, false, false, "*", false>") budget=240 ;;
    "dkvq_kernel<128, 64, false, false, false, true, false>") budget=560 ;;
    "dkvq_kernel<64, 64, true, false, false, "*", false>") budget=32 ;;
    "dkvq_kernel<128, 64, false, false, true, false, false>") budget=160 ;;
    "dkvq_kernel<128, 64, false, false, true, true, false>") budget=280 ;;
    "dkvq_kernel<128, 64, false, false, false, false, true>") budget=900 ;;
    "dkvq_kernel<128, 64, false, false, false, true, true>") budget=1150 ;;
    "dkvq_kernel<64, 64, false, false, false, "*", true>") budget=260 ;;
    "dkvq_kernel<128, 32, true, false, false, "*", true>") budget=560 ;;
    "dkvq_kernel<64, 64, true, false, false, "*", true>") budget=280 ;;
    "dkvq_kernel<128, 64, false, false, true, "*", true>") budget=1150 ;;
    "dkvq_kernel<64, 64, false, false, true, "*", true>") budget=260 ;;
    "dkv_wg_kernel<128, false, false>"|"dkv_wg_kernel<128, true, false>") budget=160 ;;
    "fwd_wg_kernel<64, 2, true, false, 1>") budget=256 ;;
    "dq_wg_kernel<128, true>") budget=64 ;;
    "dkv_wg_kernel<128, false, true>") budget=1100 ;;
    fwd_kernel*|dq_kernel*|dkv_kernel*|dkvq_kernel*|fwd_wg_kernel*|fwd_ws_kernel*|dq_wg_kernel*|dkv_wg_kernel*) budget=0 ;;
    *) echo "kernel_registers: unknown kernel $name (give it a budget here)"; fail=1; continue ;;
  esac
  n=$((n + 1))
  verdict=ok
  [ "$st" -gt "$budget" ] && { verdict="OVER BUDGET"; fail=1; }
  printf '%-36s %9s %13s %12s %8s  %s\n' "$name" "$reg" "$st" "$ld" "$budget" "$verdict"
done < "$tmp/kernels.txt"
# plain: forward and dQ at D 64 and 128, dK/dV at D 64 and 128 with and without FoX, the one pass
# at D 64 and 128 with and without the rows' sums; general: forward, dQ and dK/dV at D 64 and 128;
# each bf16 and split; with sm_90 the wgmma kernels: forward, dQ and dK/dV (with and without FoX) at
# D 64 and 128, the one pass at D 64 and 128 with and without the rows' sums
serialized=$(grep -h 'wgmma.mma_async instructions are serialized' "$tmp/ptxas.txt" |
  sed -E "s/.*(C75[0-9]+).* in the function '([^']+)'.*/\2 (\1)/" | c++filt)
if [ -n "$serialized" ]; then
  echo "kernel_registers: ptxas serialized the wgmma instructions of:"
  echo "$serialized"
  fail=1
fi
# and any other loss ptxas reports (a setmaxnreg it ignores: the warp-specialised forward's
# consumers would be held to the 168 registers at entry)
losses=$(grep -h 'Potential Performance Loss' "$tmp/ptxas.txt" | grep -v 'wgmma.mma_async instructions are serialized')
if [ -n "$losses" ]; then
  echo "kernel_registers: ptxas reports:"
  echo "$losses"
  fail=1
fi
if [ "$n" -ne "$expect" ]; then
  echo "kernel_registers: expected $expect tensor-core kernels in ptxas's report, found $n"
  fail=1
fi
if [ "$ARCH" != 90 ] && [ $fail = 1 ]; then
  echo "kernel_registers: the budgets are for sm_90; sm_$ARCH reported only"
  exit 0
fi
exit $fail
