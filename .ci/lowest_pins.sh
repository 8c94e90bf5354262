#!/usr/bin/env bash
# CI: a fast subset of the tests against the lowest dependency versions pyproject.toml allows
# (.ci/lowest-pins.txt), in a fresh virtual environment of its own.
set -euo pipefail
tree="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
venv="$work/venv/bin"
"$venv/pip" install -q torch==2.13.0 -r "$tree/.ci/lowest-pins.txt" pytest
"$venv/pip" install -q -e "$tree" -c "$tree/.ci/lowest-pins.txt"
"$venv/pip" list 2>/dev/null | grep -iE '^(numpy|scipy|numba|torch|pymanopt|geoopt|autograd) '
cd "$tree"
NUMBA_CACHE_DIR="$work/numba-cache" "$venv/python" -m pytest -q -p no:cacheprovider \
  tests/solvers/test_certificates.py tests/adapters/test_public_api.py tests/kernels/test_subproblem_jorth2.py
