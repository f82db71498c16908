#!/usr/bin/env bash
# Long fuzzing runs of every parser: scripts/fuzz.sh [SECONDS] [hz_fuzz arguments] (default 300 s).
# The same as scripts/tools/fuzz.sh, which documents the options and keeps new failing inputs under
# tests/fuzz/crashes/<parser>/ (CTest's hz_fuzz replays them).
exec "$(dirname "$0")/tools/fuzz.sh" "$@"
