#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, on loopback, for trying the batch scripts in
# jobs/ (and for the test suite, which drives this same script).
#
#   eval "$(scripts/slurm-local.sh start)"   # prints `export SLURM_CONF=…`; sbatch, squeue … then use it
#   sbatch jobs/one-node.sbatch
#   scripts/slurm-local.sh status
#   scripts/slurm-local.sh stop
#
# Everything lives in one directory (NPMPI_SLURM_DIR, default /tmp/npmpi-slurm; a second argument
# overrides it): its own munge key and socket, slurm.conf, state, spool, logs and PID files. Nothing
# is written to /etc and no system service is touched; the ports are free ones picked at start.
# Needs root (Slurm's daemons, and apt-get to install Debian's slurm-wlm and munge when missing).
#
# The node claims CPUs=4 on whatever cores the machine has (SlurmdParameters=config_overrides), so
# a job of one ping-pong pair plus one power rank fits, and jobs run one after another.
set -euo pipefail

ACTION=${1:-}
DIR=${2:-${NPMPI_SLURM_DIR:-/tmp/npmpi-slurm}}
NODE_CPUS=${NPMPI_SLURM_CPUS:-4}
# libpmix-dev: slurmd loads its mpi/pmix plugin when it starts, and that plugin dlopens libpmix.so
# (the -dev package's name); without it `srun --mpi=pmix` steps fail for the daemons' lifetime,
# even once an MPI that brings PMIx is installed later
PACKAGES=(slurmctld slurmd slurm-client munge libpmix-dev)

die() { echo "slurm-local: $*" >&2; exit 1; }
say() { echo "slurm-local: $*" >&2; }

usage() {
  cat >&2 <<EOF
usage: scripts/slurm-local.sh start|stop|status|env [DIR]
  start   install slurm-wlm and munge if missing, start munged, slurmctld and slurmd; prints
          'export SLURM_CONF=DIR/etc/slurm.conf' (use: eval "\$(scripts/slurm-local.sh start)")
  stop    cancel this cluster's jobs, stop its daemons (by their PID files)
  status  daemons, node and queue
  env     print the export line again
DIR defaults to \$NPMPI_SLURM_DIR or /tmp/npmpi-slurm.
EOF
  exit 2
}

CONF="$DIR/etc/slurm.conf"
# Every daemon started here carries this in its environment; `stop` uses it to find a leftover
# slurmstepd of this cluster (each process is then ended by its PID).
MARK="NPMPI_SLURM_LOCAL=$DIR"

pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }
pid_of() { if [[ -s "$DIR/run/$1.pid" ]]; then cat "$DIR/run/$1.pid"; fi; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep "ok installed" >/dev/null; }

ensure_packages() {
  local missing=() pkg
  if command -v dpkg-query >/dev/null; then
    for pkg in "${PACKAGES[@]}"; do installed "$pkg" || missing+=("$pkg"); done
  else
    for pkg in slurmctld slurmd sbatch munged; do
      command -v "$pkg" >/dev/null || [[ -x /usr/sbin/$pkg ]] || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) || die "missing ${missing[*]} and this is not Debian/Ubuntu: install Slurm and munge by hand"
    return
  fi
  ((${#missing[@]} == 0)) && return
  [[ $(id -u) -eq 0 ]] || die "missing packages ${missing[*]}; run as root, or: sudo apt-get install ${missing[*]}"
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get"
  say "apt-get install ${missing[*]}"
  apt-get update -qq >/dev/null
  # the packages' own services are not wanted: this cluster runs its daemons itself
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

free_ports() {  # two distinct free TCP ports on loopback
  python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}

write_conf() {
  local node=$1 ctld_port=$2 d_port=$3
  cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: one node on loopback, everything under $DIR
ClusterName=npmpi-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# no cgroups needed: processes are tracked by parentage, tasks are not bound
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
ReturnToService=2
# after SIGTERM at the time limit, SIGKILL comes this many seconds later
KillWait=10
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=$NODE_CPUS State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

wait_for() { # wait_for SECONDS COMMAND...: until COMMAND succeeds; false after SECONDS
  local end=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 0.1
  done
}

start() {
  [[ $(id -u) -eq 0 ]] || die "Slurm's daemons need root here (slurmd runs jobs as their user); run as root"
  ensure_packages
  if pid_alive "$(pid_of slurmctld)" || pid_alive "$(pid_of slurmd)" || pid_alive "$(pid_of munged)"; then
    die "a cluster is already running in $DIR (scripts/slurm-local.sh stop $DIR first)"
  fi
  mkdir -p "$DIR"
  chmod 755 "$DIR"
  rm -rf "${DIR:?}"/{etc,state,spool,log,run,munge}
  mkdir -p "$DIR"/{etc,state,spool,log,run,munge}
  chmod 700 "$DIR/munge"
  head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
  chmod 400 "$DIR/munge/munge.key"

  local node ports
  node=$(hostname -s)
  read -r -a ports <<<"$(free_ports)"
  write_conf "$node" "${ports[0]}" "${ports[1]}"
  export SLURM_CONF="$CONF"

  env "$MARK" /usr/sbin/munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
    || die "munged did not start; see $DIR/log/munged.log"
  wait_for 10 test -S "$DIR/munge/munge.socket" || die "munged made no socket; see $DIR/log/munged.log"

  env "$MARK" /usr/sbin/slurmctld -f "$CONF" -i || die "slurmctld did not start; see $DIR/log/slurmctld.log"
  env "$MARK" /usr/sbin/slurmd -f "$CONF" -N "$node" || die "slurmd did not start; see $DIR/log/slurmd.log"
  if ! wait_for 30 sh -c "sinfo -h -N -o %t | grep -Eq '^(idle|mix|alloc)'"; then
    sinfo -N >&2 || true
    tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
    stop >/dev/null 2>&1 || true
    die "the node did not come up within 30 s (logs above)"
  fi
  say "cluster up: node $node, $NODE_CPUS CPUs, slurmctld port ${ports[0]}, slurmd port ${ports[1]}, dir $DIR"
  echo "export SLURM_CONF=$CONF"
}

marked_pids() {  # processes started by this cluster (daemons and their slurmstepd children)
  local p
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "$$" ]] && continue
    if grep -qzxF "$MARK" "$p/environ" 2>/dev/null; then
      echo "${p#/proc/}"
    fi
  done
}

stop() {
  [[ -f "$CONF" ]] || { say "nothing to stop in $DIR"; return 0; }
  export SLURM_CONF="$CONF"
  local name pid pids=()
  if pid_alive "$(pid_of slurmctld)"; then
    # jobs first, so no batch script or MPI rank outlives the cluster
    timeout 10 scancel --full --quiet --state=RUNNING 2>/dev/null || true
    timeout 10 scancel --quiet 2>/dev/null || true
    local end=$((SECONDS + 15))
    while ((SECONDS < end)) && [[ -n "$(timeout 5 squeue -h -t RUNNING,COMPLETING,PENDING -o %i 2>/dev/null)" ]]; do
      sleep 0.2
    done
  fi
  for name in slurmd slurmctld munged; do
    pid=$(pid_of "$name")
    if pid_alive "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  for pid in $(marked_pids); do
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
  done
  local end=$((SECONDS + 10))
  for pid in "${pids[@]}"; do
    while pid_alive "$pid" && ((SECONDS < end)); do sleep 0.1; done
    if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  rm -f "$DIR"/run/*.pid
  say "stopped (${#pids[@]} processes)"
}

status() {
  [[ -f "$CONF" ]] || { say "no cluster in $DIR"; return 3; }
  export SLURM_CONF="$CONF"
  local name pid up=0
  for name in munged slurmctld slurmd; do
    pid=$(pid_of "$name")
    if pid_alive "$pid"; then
      echo "$name: running (pid $pid)"
      up=$((up + 1))
    else
      echo "$name: not running"
    fi
  done
  if ((up == 3)); then
    sinfo -N -o "%N %t %c CPUs" || true
    squeue || true
  fi
  echo "SLURM_CONF=$CONF"
  ((up == 3)) || return 3
}

case "$ACTION" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) [[ -f "$CONF" ]] || die "no cluster in $DIR"; echo "export SLURM_CONF=$CONF" ;;
  *) usage ;;
esac
