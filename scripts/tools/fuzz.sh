#!/usr/bin/env bash
# Long fuzzing runs (issue 19): hz_fuzz over every parser for SECONDS (default 300), replaying the
# kept regression inputs first. New failing inputs are kept under tests/fuzz/crashes/<parser>/
# (commit them: the CTest entry hz_fuzz replays that folder, so a fixed crash stays fixed).
#   scripts/tools/fuzz.sh [SECONDS] [extra hz_fuzz arguments, e.g. --target tokenizer_json --seed 7]
# BUILD (default build/) holds the hz_fuzz binary: cmake --build build --target hz_fuzz
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
secs="${1:-300}"
if [[ "$secs" == "--help" || "$secs" == "-h" ]]; then
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if ! [[ "$secs" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "fuzz.sh: SECONDS must be a number, got '$secs' (scripts/tools/fuzz.sh --help)" >&2
  exit 2
fi
shift || true
bin="${BUILD:-$here/build}/hz_fuzz"
if [[ ! -x "$bin" ]]; then
  echo "fuzz.sh: no $bin; build it first: cmake --build ${BUILD:-build} --target hz_fuzz" >&2
  exit 2
fi
seed="${SEED:-$(date +%s)}"
echo "fuzz.sh: $secs s, seed $seed; failing inputs go to tests/fuzz/crashes/<parser>/"
exec "$bin" --seconds "$secs" --seed "$seed" --replay "$here/tests/fuzz/crashes" --save "$here/tests/fuzz/crashes" "$@"
