#!/usr/bin/env bash
# The README's main job on a fresh Debian/Ubuntu machine with Python 3.11: what the embedded model's build
# needs (cmake and g++, from Debian's packages, as root or through sudo), the virtual environment with the
# local extra (llama-cpp-python compiles once, then pip reuses the wheel it built), then `reinloop run` with
# the arguments given.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
needed=()
command -v cmake >/dev/null || needed+=(cmake)
command -v g++ >/dev/null || needed+=(g++)
python3 -c "import ensurepip" 2>/dev/null || needed+=(python3-venv)
if [ ${#needed[@]} -gt 0 ]; then
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  echo "installing ${needed[*]} (Debian packages: the embedded model's build needs them)" >&2
  "${as_root[@]}" apt-get update -q >&2
  "${as_root[@]}" apt-get install -y -q "${needed[@]}" >&2
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
if ! .venv/bin/python -c "import llama_cpp, reinloop, starlette, uvicorn, jinja2" 2>/dev/null; then
  echo "installing reinloop with the embedded model (llama-cpp-python compiles for 10-30 minutes the first time)" >&2
  # A portable AVX2 build: built for the native CPU (AVX-512, AMX), llama-cpp-python 0.3.36 crashes on this
  # kind of machine at its first batched decode.
  # The inspect extra too: `.venv/bin/reinloop inspect` shows the runs on a local web page.
  CMAKE_ARGS="${CMAKE_ARGS:-$(cat scripts/llama-cmake-args)}" .venv/bin/pip install -q -e '.[local,inspect]'
fi
exec .venv/bin/reinloop run "$@"
