#!/usr/bin/env bash
# What bench/netpipe_compare.py needs, on Debian/Ubuntu: Debian's Open MPI (openmpi-bin,
# libopenmpi-dev) and NetPIPE built on it (netpipe-openmpi, /usr/bin/NPopenmpi), and a separate
# virtual environment (.venv-debian-mpi) whose mpi4py and npmpi C kernel are built with
# /usr/bin/mpicc, so NetPIPE and both npmpi kernels run on one MPI library under /usr/bin/mpirun.
# Idempotent: packages are installed only when missing, and scripts/setup.sh rebuilds only when
# its inputs change.
#
#   bench/setup-debian-mpi.sh          # as root (apt-get); NPMPI_DEBIAN_VENV overrides the venv path
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${NPMPI_DEBIAN_VENV:-.venv-debian-mpi}
PYTHON=${PYTHON:-python3}

die() { echo "setup-debian-mpi: $*" >&2; exit 1; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }

command -v dpkg-query >/dev/null || die "not a Debian/Ubuntu system (no dpkg-query): install Open MPI, NetPIPE and their headers by hand"
packages=(netpipe-openmpi openmpi-bin libopenmpi-dev)
command -v cc >/dev/null || command -v gcc >/dev/null || packages+=(gcc)
command -v make >/dev/null || command -v ninja >/dev/null || packages+=(make)
# Python.h is needed to build mpi4py and the C kernel; Debian's python3 keeps it in python3-dev
if ! "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  packages+=(python3-dev)
fi
missing=()
for pkg in "${packages[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  [[ $(id -u) -eq 0 ]] || die "missing packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}"
  echo "setup-debian-mpi: apt-get install ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
for f in /usr/bin/mpicc /usr/bin/mpirun /usr/bin/NPopenmpi; do
  [[ -x $f ]] || die "$f is missing after installing ${packages[*]}"
done
# /usr/bin/mpicc and /usr/bin/mpirun are Debian alternatives: they must be Open MPI's
/usr/bin/mpirun --version 2>&1 | grep -q "Open MPI" \
  || die "/usr/bin/mpirun is not Open MPI's (update-alternatives --config mpirun)"
/usr/bin/mpicc --showme:version 2>&1 | grep -q "Open MPI" \
  || die "/usr/bin/mpicc is not Open MPI's (update-alternatives --config mpi)"

NPMPI_VENV="$VENV" NPMPI_MPI=system MPICC=/usr/bin/mpicc PYTHON="$PYTHON" scripts/setup.sh >&2

# Check the result: mpi4py and the C kernel both on Debian's libmpi
"$VENV/bin/python" - <<'PY' >&2
import sys

import mpi4py

mpi4py.rc.initialize = False
from mpi4py import MPI

from npmpi import _build_info

lib = MPI.Get_library_version().replace("\0", "").splitlines()[0].strip()
problems = []
if "Debian" not in lib:
    problems.append(f"mpi4py uses {lib!r}, not Debian's Open MPI")
if not _build_info.CKERNEL_BUILT:
    problems.append(f"the C kernel was not built: {_build_info.CKERNEL_REASON}")
elif _build_info.MPI_C_COMPILER != "/usr/bin/mpicc":
    problems.append(f"the C kernel was built with {_build_info.MPI_C_COMPILER}, not /usr/bin/mpicc")
else:
    from npmpi import _ckernel

    maps = [line.split()[-1] for line in open("/proc/self/maps") if "libmpi.so" in line]
    if _ckernel.library_version().replace("\0", "").splitlines()[0].strip() != lib or any(
        not p.startswith(("/usr/lib/", "/lib/")) for p in maps
    ):
        problems.append(f"the C kernel is not on Debian's libmpi (mapped: {sorted(set(maps))})")
if problems:
    sys.exit("setup-debian-mpi: " + "; ".join(problems))
print(f"setup-debian-mpi: ready: mpi4py {mpi4py.__version__} and the C kernel on {lib}")
PY
