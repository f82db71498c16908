#!/usr/bin/env bash
# The layering rules of docs/design.md, checked on the source tree (CTest: layering):
#   1. a folder includes only itself and the folders below it (the table below);
#   2. nothing above core/ includes a backend's headers (core/cpu/, core/cuda/), except op kernels
#      that are backend code themselves (the fused attention's CPU and CUDA kernels, the kernel lab)
#      and core's own tests;
#   3. every top-level folder of code appears in README.md's layout table;
#   4. every project header an include names exists (no include of a moved or deleted file).
# Beside the floors: cli/ may include every library, dev/ (the kernel lab) core, autograd and
# attention, tests/ every library; no library includes cli/, dev/ or tests/.
set -u
cd "$(dirname "$0")/.."
declare -A allowed=(
  [core]="core"
  [autograd]="core autograd"
  [data]="core data"
  [io]="core io"
  [attention]="core autograd attention"
  [optim]="core autograd optim"
  [nn]="core autograd attention nn"
  [distributed]="core autograd attention nn data optim distributed"
  [eval]="core autograd attention nn data distributed eval"
  [hf]="core autograd attention nn data io hf"
  [train]="core autograd attention nn data io optim distributed eval train"
  [study]="core autograd attention nn data io optim distributed eval hf train study"
  # beside the floors: the executable, the kernel lab, the tests (no library includes these)
  [cli]="core autograd attention nn data io optim distributed eval hf train study cli"
  [dev]="core autograd attention dev"
  [tests]="core autograd attention nn data io optim distributed eval hf train study tests"
)
fail=0
for dir in "${!allowed[@]}"; do
  while IFS=: read -r file inc; do
    top=${inc%%/*}
    case " ${allowed[$dir]} " in
      *" $top "*) ;;
      *) echo "layering: $file includes \"$inc\": $dir/ may include only ${allowed[$dir]}"; fail=1 ;;
    esac
  done < <(grep -rHoE '^#include "[a-z_]+/[^"]+"' "$dir" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' |
           sed -E 's/#include "([^"]+)"/\1/')
done
while IFS= read -r line; do
  echo "layering: $line: a backend's internals above core/ (use core/device.h)"
  fail=1
done < <(grep -rnE '#include "core/(cpu|cuda)/' --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
           autograd data io attention optim distributed nn eval hf train study cli tests |
         grep -vE '^(attention/fused_cpu\.cpp|attention/cuda/|tests/core/)')
for d in */; do
  d=${d%/}
  case $d in build*|Testing) continue ;; esac
  ls "$d"/*.cpp "$d"/*.h "$d"/*.cu "$d"/*/*.cu > /dev/null 2>&1 || continue
  grep -qE "^\| \`$d/\`" README.md || { echo "layering: $d/ is missing from README.md's layout table"; fail=1; }
done
while IFS=: read -r file inc; do
  # a protobuf header is generated into the build directory from the .proto beside it
  [ -f "$inc" ] || [ -f "${inc%.pb.h}.proto" ] || { echo "layering: $file includes \"$inc\", which does not exist"; fail=1; }
done < <(grep -rHoE '^#include "[a-z_]+/[^"]+"' "${!allowed[@]}" --include='*.h' --include='*.cpp' --include='*.cu' \
           --include='*.cuh' | sed -E 's/#include "([^"]+)"/\1/')
[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
