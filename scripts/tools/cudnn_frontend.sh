#!/usr/bin/env bash
# Puts cudnn-frontend's C++ headers (header-only; from PyPI's nvidia-cudnn-frontend wheel, the
# version pinned below) in .deps/cudnn-frontend/include (ignored by git), where CMakeLists.txt
# looks for them (HZ_CUDNN_FRONTEND_DIR): cuDNN's fused attention (attention/cuda/attn_cudnn.cpp).
# scripts/setup.sh runs it where nvcc is found; scripts/gpu/gpu_deps.sh packs the headers for the
# GPU machine. Idempotent (a different pinned version replaces the folder); prints the folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=${HZ_CUDNN_FRONTEND_VERSION:-1.32.0}
DEST=.deps/cudnn-frontend
if [ "$(cat "$DEST/VERSION" 2> /dev/null)" != "$VERSION" ] || [ ! -f "$DEST/include/cudnn_frontend.h" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "[cudnn-frontend] nvidia-cudnn-frontend==$VERSION from PyPI (its C++ headers)" >&2
  python3 -m pip download -q --no-deps -d "$tmp/whl" "nvidia-cudnn-frontend==$VERSION" >&2
  python3 - "$tmp/whl" "$tmp/out" << 'PY'
import glob, os, sys, zipfile
(whl,) = glob.glob(os.path.join(sys.argv[1], "*.whl"))
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/") or "/licenses/" in n]
    assert any(n.endswith("include/cudnn_frontend.h") for n in names), "no include/cudnn_frontend.h in " + whl
    for n in names:
        z.extract(n, sys.argv[2])
PY
  mkdir -p .deps && rm -rf "$DEST" && mv "$tmp/out" "$DEST"
  echo "$VERSION" > "$DEST/VERSION"
fi
echo "$PWD/$DEST/include"
