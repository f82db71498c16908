#!/usr/bin/env bash
# Creates (once) the Python virtual environment the reference scripts use: fixture generators
# (tokenizers, sentencepiece, transformers, safetensors) and the PyTorch benchmark twins. Current
# releases from PyPI, never Debian's python3-torch 1.13. Not needed by the build; the tests' fixtures
# are committed, and the tests that read outputs back through PyPI libraries get their own light venv.
#
#   scripts/tools/venv.sh            # creates .venv/ (ignored) if missing, prints its python
#   HZ_VENV=/path scripts/tools/venv.sh   # use (and complete) a venv elsewhere
#   HZ_VENV=build/test-venv HZ_VENV_PKGS="tensorboard torch lm-eval=lm_eval" scripts/tools/venv.sh
#                                    # another set of packages (PIP_NAME or PIP_NAME=MODULE): scripts/test.sh's
#                                    # venv for the tests that read Horizon's outputs with the libraries
#                                    # defining the formats and run its exports in transformers and lm-eval
#
# Usage from another script:  PY=$(scripts/tools/venv.sh)  then  "$PY" script.py
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${HZ_VENV:-.venv}
read -r -a PKGS <<< "${HZ_VENV_PKGS:-torch transformers tokenizers sentencepiece safetensors numpy matplotlib}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[venv] creating $VENV (${PKGS[*]})" >&2
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" >&2
fi
missing=()
for p in "${PKGS[@]}"; do  # PIP_NAME or PIP_NAME=MODULE (lm-eval=lm_eval)
  "$VENV/bin/python" -c "import ${p#*=}" 2>/dev/null || missing+=("${p%%=*}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[venv] installing: ${missing[*]}" >&2
  "$VENV/bin/pip" install -q "${missing[@]}" >&2
fi
echo "$(cd "$VENV" && pwd)/bin/python"
