#!/usr/bin/env bash
# Creates (once) the Python virtual environment the reference scripts use: fixture generators
# (tokenizers, sentencepiece, transformers, safetensors) and the PyTorch benchmark twins. Current
# releases from PyPI, never Debian's python3-torch 1.13. Never needed by the build or the tests:
# fixtures are committed.
#
#   scripts/tools/venv.sh            # creates .venv/ (ignored) if missing, prints its python
#   HZ_VENV=/path scripts/tools/venv.sh   # use (and complete) a venv elsewhere
#
# Usage from another script:  PY=$(scripts/tools/venv.sh)  then  "$PY" script.py
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${HZ_VENV:-.venv}
PKGS=(torch transformers tokenizers sentencepiece safetensors numpy matplotlib)
if [ ! -x "$VENV/bin/python" ]; then
  echo "[venv] creating $VENV (PyTorch from PyPI is ~3 GB, a few minutes)" >&2
  python3 -m venv "$VENV"
fi
missing=()
for p in "${PKGS[@]}"; do
  "$VENV/bin/python" -c "import $p" 2>/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[venv] installing: ${missing[*]}" >&2
  "$VENV/bin/pip" install -q "${missing[@]}" >&2
fi
echo "$(cd "$VENV" && pwd)/bin/python"
