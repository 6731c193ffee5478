#!/usr/bin/env bash
# A single-node Slurm on this machine for the slurm test tier, from Debian's packages (slurm-wlm, munge).
#
#   tests/slurm/cluster.sh install   apt-get update and install slurm-wlm munge (root)
#   tests/slurm/cluster.sh start     munged, slurmctld -D and slurmd -D in the background; waits for the node to be idle
#   tests/slurm/cluster.sh stop      ends the three daemons this script started (by their recorded PIDs)
#   tests/slurm/cluster.sh env       prints the SLURM_CONF line that points Slurm's commands at this cluster
#
# Everything lives in one folder ($LADD_SLURM_DIR, default /tmp/ladd-slurm): its own munge key and socket, slurm.conf,
# state, logs and the daemons' PIDs, so nothing under /etc is written and no system service is touched. Slurm's
# commands find the cluster through SLURM_CONF=$LADD_SLURM_DIR/slurm.conf. The node is this host as `slurmd -C` sees
# it; there are no cgroups here, so processes are tracked through /proc and tasks are not confined. Jobs may be
# requeued (JobRequeue=1); no accounting is kept (ladd follows jobs with squeue, not sacct).
set -euo pipefail

DIR="${LADD_SLURM_DIR:-/tmp/ladd-slurm}"
CONF="$DIR/slurm.conf"
PIDS="$DIR/pids"
CTLD_PORT="${LADD_SLURM_PORT:-6817}"

die() { echo "cluster.sh: $*" >&2; exit 1; }

running() {  # the recorded PIDs that are still alive
  [ -f "$PIDS" ] || return 1
  local alive=0 pid
  for pid in $(cut -d' ' -f2 "$PIDS"); do
    kill -0 "$pid" 2>/dev/null && alive=1
  done
  [ "$alive" = 1 ]
}

install() {
  [ "$(id -u)" = 0 ] || die "installing needs root (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

write_config() {
  local node hardware
  node="$(hostname -s)"
  # CPUs, sockets, cores, threads and memory exactly as slurmd detects them (a node that claims more is drained)
  hardware="$(slurmd -C | head -1 | sed "s/^NodeName=[^ ]* //")"
  cat >"$CONF" <<EOF
ClusterName=ladd-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
JobRequeue=1
MpiDefault=none
NodeName=$node NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  for tool in munged mungekey slurmctld slurmd sinfo sbatch; do
    command -v "$tool" >/dev/null || die "$tool not found: install Debian's slurm-wlm and munge ($0 install)"
  done
  if running; then
    echo "cluster.sh: already running ($PIDS); export SLURM_CONF=$CONF"
    return 0
  fi
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
  chmod 700 "$DIR"
  [ -f "$DIR/munge.key" ] || mungekey --create --keyfile="$DIR/munge.key"
  chmod 400 "$DIR/munge.key"
  write_config
  export SLURM_CONF="$CONF"
  : >"$PIDS"
  munged --foreground --force --socket="$DIR/munge.socket" --key-file="$DIR/munge.key" \
    --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munged.seed" \
    >>"$DIR/log/munged.out" 2>&1 &
  echo "munged $!" >>"$PIDS"
  for _ in $(seq 50); do [ -S "$DIR/munge.socket" ] && break; sleep 0.1; done
  [ -S "$DIR/munge.socket" ] || die "munged did not start: see $DIR/log/munged.log"
  slurmctld -D -c -f "$CONF" >>"$DIR/log/slurmctld.out" 2>&1 &
  echo "slurmctld $!" >>"$PIDS"
  slurmd -D -f "$CONF" >>"$DIR/log/slurmd.out" 2>&1 &
  echo "slurmd $!" >>"$PIDS"
  # ready when the node reports idle (about 1.5 s)
  local state=""
  for _ in $(seq 150); do
    state="$(sinfo -h -o %T 2>/dev/null || true)"
    [ "$state" = idle ] && break
    sleep 0.2
  done
  if [ "$state" != idle ]; then
    stop >/dev/null 2>&1 || true
    die "the node did not become idle (state: ${state:-no answer}); see $DIR/log/"
  fi
  echo "cluster.sh: running ($(sinfo -h -o '%N %c CPUs %m MB')); export SLURM_CONF=$CONF"
}

stop() {
  [ -f "$PIDS" ] || { echo "cluster.sh: not running (no $PIDS)"; return 0; }
  local name pid
  # the compute daemon first, the authentication daemon last
  for name in slurmd slurmctld munged; do
    pid="$(awk -v n="$name" '$1 == n {print $2}' "$PIDS")"
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$PIDS"
  echo "cluster.sh: stopped"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) die "usage: $0 install|start|stop|env" ;;
esac
