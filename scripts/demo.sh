#!/usr/bin/env bash
# The main job, end to end: set up, then a real ping-pong sweep on this machine into runs/.
# Extra arguments go to `python -m npmpi` (e.g. scripts/demo.sh --quick, or --kernel c).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/mpi-env.sh
VENV=${NPMPI_VENV:-.venv}
mkdir -p runs
out="runs/npmpi-$(date -u +%Y%m%d-%H%M%S).h5"
np=2
oversub=()
[[ $(nproc) -lt $np ]] && oversub=(--oversubscribe)
"$VENV/bin/mpirun" -np "$np" "${oversub[@]}" "$VENV/bin/python" -m npmpi -o "$out" "$@"
echo "run file: $out"
