#!/usr/bin/env bash
# Everything the tests need on a fresh Debian/Ubuntu machine (run as root), then the tests and the linter.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
if ! command -v dot >/dev/null || ! command -v pg_ctlcluster >/dev/null || ! command -v cmake >/dev/null \
  || ! command -v g++ >/dev/null || ! command -v chromedriver >/dev/null; then
  apt-get update -q
  # graphviz: PNG/SVG drawing; postgresql: checkpointer tests; cmake and g++: llama-cpp-python's build;
  # chromium and its driver: the browser test of `reinloop inspect` (tests/inspect/test_inspect_browser.py, headless)
  apt-get install -y -q graphviz postgresql cmake g++ chromium chromium-driver
fi
REINLOOP_TEST_POSTGRES_URL=$(bash scripts/start-postgres.sh | tail -1)
export REINLOOP_TEST_POSTGRES_URL
python3 -m venv .venv
# torch first, pinned: this version is a CPU build here, while an unpinned torch pulls a CUDA build.
.venv/bin/pip install -q torch==2.13.0
# The dev extra includes the local model: llama-cpp-python compiles for about 11 minutes the first time.
# A portable AVX2 build: llama-cpp-python 0.3.36 built for the native CPU (AVX-512, AMX) segfaults here
# on every batched decode.
export CMAKE_ARGS="${CMAKE_ARGS:-$(cat scripts/llama-cmake-args)}"
.venv/bin/pip install -q -e '.[dev]'
# BFCL's data and checkers run in an environment of their own, since bfcl-eval's pins clash with reinloop's:
# seven packages without their dependencies (50 MB, seconds), made once in reinloop's cache folder
# (reinloop_eval/bfcl/bridge.py; tests/eval/test_bfcl.py).
.venv/bin/python -c "from reinloop_eval.bfcl import install; install()"
.venv/bin/python -m pytest "$@"
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/ruff format --check .
