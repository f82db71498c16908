#!/usr/bin/env bash
# Compiler launcher for the tensor-core attention kernels (CMakeLists.txt, hz_attention's CUDA
# sources): runs the compile command it is given ("$@": ccache or nothing, then nvcc and its
# arguments) and moves ptxas's report (-Xptxas=-v: registers and spill bytes per kernel) from the
# compiler's stderr into DIR/<source file name>.txt, where the register test
# (tests/kernel_registers.sh) reads it, instead of compiling the kernels a second time. Any other
# output (warnings, errors) still goes to stderr; the exit status is the compiler's. A compile
# without a report (the files that do not ask for one) writes nothing.
#   ptxas_report.sh DIR COMMAND...
set -u
dir=$1
shift
src=
prev=
for a in "$@"; do
  [ "$prev" = -c ] && src=$a
  prev=$a
done
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$@" 2> "$err"
rc=$?
# the report: "ptxas info : ..." lines and the indented "N bytes stack frame, ..." under each, and
# ptxas's "Potential Performance Loss" warnings (a setmaxnreg it ignored, C7508), which also stay
# on stderr
log=$dir/$(basename "$src").txt
[ $rc -ne 0 ] && rm -f "$log"   # no object, no report: the test must not read an older one
if [ $rc -eq 0 ] && [ -n "$src" ] && grep -q '^ptxas info' "$err"; then
  mkdir -p "$dir"
  grep -E '^(ptxas info|    [0-9]+ bytes stack frame|ptxas warning.*Potential Performance Loss)' "$err" > "$log.part" &&
    mv "$log.part" "$log"
fi
grep -v -E '^(ptxas info|    [0-9]+ bytes stack frame)' "$err" >&2
exit $rc
