#!/usr/bin/env bash
# A real, single-host Slurm cluster for tests: munged, slurmctld and one slurmd named `localhost`
# (127.0.0.1), all configured in one scratch folder and stopped again, even on failure.
#
#   tools/slurm_local.sh COMMAND [ARG...]     runs COMMAND with SLURM_CONF set (srun, sbatch, ...)
#
# Installs the Debian packages slurmctld, slurmd and munge where missing. Nothing outside the
# scratch folder is written: no /etc/slurm, no system munge key, no systemd units. The daemons run
# in the foreground of this script's children and are waited on by event (sinfo shows the node
# idle), never by a fixed sleep; every wait has a timeout. Env: PHOBOS_SLURM_DIR (keep the folder
# there instead of a temporary one), PHOBOS_SLURM_TIMEOUT (seconds for the cluster to come up, 60).
set -euo pipefail

say() { echo "slurm_local: $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

ensure_packages() {
  local missing=() pkg
  for pkg in slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  say "installing ${missing[*]} (apt-get)"
  local wait=(-o DPkg::Lock::Timeout=300)
  as_root apt-get "${wait[@]}" update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get "${wait[@]}" install -y -qq "${missing[@]}" >&2
}

[ $# -ge 1 ] || { say "usage: tools/slurm_local.sh COMMAND [ARG...]"; exit 2; }
ensure_packages

dir=${PHOBOS_SLURM_DIR:-$(mktemp -d /tmp/phobos-slurm.XXXXXX)}
mkdir -p "$dir"/{state,spool,munge,log}
chmod 700 "$dir/munge"
timeout_s=${PHOBOS_SLURM_TIMEOUT:-60}
pids=()

cleanup() {
  local rc=$? pid
  local i
  # newest first: slurmd and slurmctld still talk to munged while they stop
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  if [ $rc -ne 0 ]; then
    say "failed (exit $rc); daemon logs:"
    tail -n 20 "$dir"/log/* >&2 2>/dev/null || true
  fi
  [ -n "${PHOBOS_SLURM_DIR:-}" ] || rm -rf "$dir"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Free ports for slurmctld and slurmd, so that a second copy of this script (or a system Slurm)
# on the same machine is no conflict.
read -r ctld_port slurmd_port < <(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)

# munge: its own key and socket in the scratch folder. --force: munged refuses a key in a folder
# it did not create otherwise, and runs as root here.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=1024 status=none
chmod 400 "$dir/munge/munge.key"
socket="$dir/munge/munge.socket"
/usr/sbin/munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$socket" \
  --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
  --log-file="$dir/log/munged.log" >>"$dir/log/munged.log" 2>&1 &
pids+=($!)

cpus=$(nproc)
user=$(id -un)
cat >"$dir/slurm.conf" <<EOF
ClusterName=phobos-local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# no cgroups inside containers: processes are tracked by process group, tasks are not bound
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=30 State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"

wait_for() {  # wait_for WHAT COMMAND...: polls COMMAND (an event check, not a guess at a delay)
  local what=$1 deadline=$((SECONDS + timeout_s))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then say "$what did not happen within ${timeout_s}s"; return 1; fi
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null || { say "a daemon (pid $pid) exited while waiting for: $what"; return 1; }
    done
    sleep 0.2
  done
}

wait_for "munged's socket" test -S "$socket"
/usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 &
pids+=($!)
wait_for "slurmctld answering" scontrol ping
/usr/sbin/slurmd -D -N localhost -f "$SLURM_CONF" >>"$dir/log/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { sinfo -h -n localhost -o '%T' | grep -qx idle; }
wait_for "node localhost idle" node_idle
say "Slurm is up ($SLURM_CONF); running: $*"
"$@"
