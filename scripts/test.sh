#!/usr/bin/env bash
# Every test: set up, lint, then the whole pytest suite (real mpirun jobs included).
# Extra arguments go to pytest (e.g. scripts/test.sh -k schedule).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/mpi-env.sh
VENV=${NPMPI_VENV:-.venv}
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/python" -m pytest "$@"
