#!/usr/bin/env bash
# Regenerates tests/fixtures/hf/* and tests/fixtures/safetensors/* with transformers / safetensors
# from PyPI (scripts/venv.sh). Offline; not part of the build or the tests (fixtures are committed).
#   HZ_VENV=/work/venv scripts/make_hf_fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(scripts/venv.sh)
"$PY" scripts/make_hf_fixtures.py tests/fixtures
