#!/usr/bin/env bash
# Several "hosts" on this machine, for running npmpi across nodes without a cluster: each host is
# a network namespace with its own address and (for the processes started in it) its own host
# name, joined to the others by a bridge that lives in a namespace of its own. Open MPI starts its
# daemons on them through an rsh agent and talks TCP over the bridge, so MPI_Get_processor_name,
# shared-memory grouping and npmpi's node layout all see separate hosts.
#
#   scripts/netns-hosts.sh up            # hosts npmpi-h1, npmpi-h2 on 10.203.0.0/24
#   scripts/netns-hosts.sh mpirun -np 4 .venv/bin/python -m npmpi --meter estimate --quick
#   scripts/netns-hosts.sh run npmpi-h2 hostname
#   scripts/netns-hosts.sh status
#   scripts/netns-hosts.sh down
#
# Settings (environment): NPMPI_NETNS_HOSTS (2), NPMPI_NETNS_PREFIX (npmpi-h: hosts are PREFIX1,
# PREFIX2, …, the bridge PREFIXbr), NPMPI_NETNS_RATE (e.g. 1gbit: every host's link is shaped to it
# with tc tbf; empty: unshaped), NPMPI_NETNS_SUBNET (10.203.0: host i is SUBNET.i/24; these
# addresses exist only inside the namespaces), NPMPI_NETNS_DIR (where the rsh agent and the
# hostfile go, default /tmp/PREFIX), NPMPI_NETNS_MPIRUN (default: the mpirun of .venv, else on
# PATH; not MPIRUN, which the batch scripts take for this script's own wrapper).
# Needs root (ip netns, unshare --uts).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)

ACTION=${1:-}
HOSTS=${NPMPI_NETNS_HOSTS:-2}
PREFIX=${NPMPI_NETNS_PREFIX:-npmpi-h}
RATE=${NPMPI_NETNS_RATE-}
SUBNET=${NPMPI_NETNS_SUBNET:-10.203.0}
DIR=${NPMPI_NETNS_DIR:-/tmp/$PREFIX}
BRIDGE=${PREFIX}br
# tbf: a small bucket keeps bursts at line rate short next to the messages that measure the plateau
# (1.5 % of 8 MiB), yet lets bulk TCP reach the rate (64 KB is too little at 1 Gbit/s here)
TBF_BURST=${NPMPI_NETNS_BURST:-128kb}
TBF_LATENCY=${NPMPI_NETNS_LATENCY:-50ms}

die() { echo "netns-hosts: $*" >&2; exit 1; }
say() { echo "netns-hosts: $*" >&2; }

hosts() { local i; for ((i = 1; i <= HOSTS; i++)); do echo "$PREFIX$i"; done; }
# (no `grep -q` after a pipe: under pipefail, the writer's SIGPIPE would fail the test)
exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -xF "$1" >/dev/null; }

check() {
  [[ $(id -u) -eq 0 ]] || die "network namespaces need root"
  command -v ip >/dev/null || die "no 'ip' command: apt-get install iproute2"
  command -v unshare >/dev/null || die "no 'unshare' command: apt-get install util-linux"
  if ! [[ $HOSTS =~ ^[0-9]+$ ]] || ((HOSTS < 1 || HOSTS > 250)); then
    die "NPMPI_NETNS_HOSTS=$HOSTS: give 1 to 250"
  fi
}

write_agent() {
  mkdir -p "$DIR"
  # Open MPI calls the agent as `AGENT [options] HOST COMMAND...`, as it would call ssh: the
  # command words are joined and run by a shell, here inside HOST's namespace under HOST's name.
  cat >"$DIR/rsh-agent" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
  case $1 in -*) shift ;; *) break ;; esac
done
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && eval "$1"' "$host" "$*"
EOF
  chmod 755 "$DIR/rsh-agent"
  hosts | sed 's/$/ slots=2/' >"$DIR/hostfile"
}

up() {
  check
  local h i
  for h in $(hosts) "$BRIDGE"; do
    exists "$h" && die "namespace $h exists already (scripts/netns-hosts.sh down, or another NPMPI_NETNS_PREFIX)"
  done
  trap 'say "set-up failed; removing what was made"; down >/dev/null 2>&1 || true' ERR
  ip netns add "$BRIDGE"
  ip -n "$BRIDGE" link set lo up
  ip -n "$BRIDGE" link add br0 type bridge
  ip -n "$BRIDGE" link set br0 up
  i=0
  for h in $(hosts); do
    i=$((i + 1))
    ip netns add "$h"
    ip -n "$h" link set lo up
    ip -n "$h" link add eth0 type veth peer name "v$i" netns "$BRIDGE"
    ip -n "$BRIDGE" link set "v$i" master br0 up
    ip -n "$h" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$h" link set eth0 up
    if [[ -n $RATE ]]; then
      ip netns exec "$h" tc qdisc add dev eth0 root tbf rate "$RATE" burst "$TBF_BURST" latency "$TBF_LATENCY"
    fi
  done
  trap - ERR
  write_agent
  # every host answers the first: a connection to a closed port is refused at once when the host is
  # reachable (no ping needed), and hangs until the timeout when it is not
  for ((i = 2; i <= HOSTS; i++)); do
    local rc=0
    ip netns exec "${PREFIX}1" timeout 3 bash -c "exec 3<>/dev/tcp/$SUBNET.$i/9" 2>/dev/null || rc=$?
    if ((rc == 124)); then
      down >/dev/null 2>&1
      die "host $PREFIX$i does not answer on $SUBNET.$i"
    fi
  done
  say "up: $(hosts | tr '\n' ' ')on $SUBNET.0/24${RATE:+, links shaped to $RATE}; agent $DIR/rsh-agent, hostfile $DIR/hostfile"
}

down() {
  local h n=0
  for h in $(hosts) "$BRIDGE"; do
    if exists "$h"; then
      ip netns pids "$h" 2>/dev/null | while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done
      ip netns del "$h" && n=$((n + 1))
    fi
  done
  rm -rf "$DIR"
  say "down: $n namespace(s) removed"
}

status() {
  local h up=0
  for h in $(hosts); do
    if exists "$h"; then
      up=$((up + 1))
      echo "$h: $(ip -n "$h" -4 -br addr show dev eth0 | awk '{print $3}'), $(ip netns exec "$h" tc qdisc show dev eth0 | sed -n 1p)"
    else
      echo "$h: absent"
    fi
  done
  ((up == HOSTS))
}

mpirun_path() {
  if [[ -n ${NPMPI_NETNS_MPIRUN:-} ]]; then echo "$NPMPI_NETNS_MPIRUN"
  elif [[ -x $REPO/.venv/bin/mpirun ]]; then echo "$REPO/.venv/bin/mpirun"
  else command -v mpirun || die "no mpirun: run scripts/setup.sh or set NPMPI_NETNS_MPIRUN"
  fi
}

run_mpirun() {
  [[ -x $DIR/rsh-agent ]] || die "no hosts: scripts/netns-hosts.sh up first"
  local first mpirun
  first=${PREFIX}1
  mpirun=$(mpirun_path)
  if [[ $(id -u) -eq 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  # mpirun itself runs on the first host; TCP only, and only on the hosts' subnet. The hosts share
  # this machine's cores: waiting ranks yield them (else their spinning starves the TCP stack).
  exec ip netns exec "$first" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$first" \
    "$mpirun" --hostfile "$DIR/hostfile" --mca plm_rsh_agent "$DIR/rsh-agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24" \
    --mca mpi_yield_when_idle 1 --bind-to none "$@"
}

case "$ACTION" in
  up) up ;;
  down) down ;;
  status) status ;;
  run)
    [[ $# -ge 3 ]] || die "usage: scripts/netns-hosts.sh run HOST COMMAND..."
    host=$2
    shift 2
    exists "$host" || die "no host $host"
    exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
    ;;
  mpirun)
    shift
    run_mpirun "$@"
    ;;
  *)
    echo "usage: scripts/netns-hosts.sh up|down|status|run HOST COMMAND...|mpirun MPIRUN-ARGS..." >&2
    exit 2
    ;;
esac
