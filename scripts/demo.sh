#!/usr/bin/env bash
# The main job, end to end: set up, a real sweep on this machine with a power rank sampling the
# `estimate` meter (CPU-load model: works anywhere, labelled *estimated*), then the analysis.
# Extra arguments go to `python -m npmpi` (e.g. scripts/demo.sh --quick, or --kernel c).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/mpi-env.sh
VENV=${NPMPI_VENV:-.venv}
mkdir -p runs
stem="runs/npmpi-$(date -u +%Y%m%d-%H%M%S)"
np=3  # the ping-pong pair and this node's power rank
oversub=()
[[ $(nproc) -lt $np ]] && oversub=(--oversubscribe --bind-to none)
"$VENV/bin/mpirun" -np "$np" "${oversub[@]}" "$VENV/bin/python" -m npmpi --meter estimate -o "$stem.h5" "$@"
"$VENV/bin/npmpi-analyze" "$stem.h5" --plots "$stem-plots" --report "$stem.html" --csv "$stem.csv"
echo
echo "run file: $stem.h5"
echo "report:   $stem.html (open it in a browser)"
echo "plots:    $stem-plots/"
echo "table:    $stem.csv"
