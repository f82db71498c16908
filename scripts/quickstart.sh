#!/usr/bin/env bash
# The main job on a fresh machine: install + build (scripts/setup.sh), train the quickstart recipe
# on the embedded King James Bible corpus, then evaluate extrapolation to 8x the training length.
# Idempotent: a finished run is evaluated again; an interrupted one resumes from its checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/horizon train recipes/quickstart.yaml checkpoint.resume=latest "$@"
build/horizon eval runs/quickstart
