#!/usr/bin/env bash
# Stop the localhost SLURM cluster of scripts/slurm/start.sh by its PID files (never by name):
# cancels its jobs first (so no slurmstepd is left behind), then slurmd, slurmctld, slurmdbd,
# MariaDB, munged. `stop.sh NAME...` stops only those daemons. RESET=1 also deletes the state dir.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
[[ -d $STATE ]] || { echo "slurm: nothing to stop ($STATE absent)"; exit 0; }
if [[ ${MXSWEEP_SLURM_LOCKED:-0} != 1 ]]; then
  exec 9>"$STATE/lock"
  flock -w 300 9 || { echo "stop.sh: $STATE/lock is held" >&2; exit 1; }
fi
names=("$@")
((${#names[@]})) || names=(slurmd slurmctld slurmdbd mariadbd munged)

stop_one() {  # TERM, wait up to 20 s, then KILL; the pid comes from the PID file only
  local name=$1 pid comm
  pid=$(cat "$(pidfile_of "$name")" 2>/dev/null) comm=$(comm_of "$name")
  pid_alive "$pid" "$comm" || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 200); do pid_alive "$pid" "$comm" || return 0; sleep 0.1; done
  echo "slurm: $name ($pid) ignored SIGTERM for 20 s; SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null
  for _ in $(seq 1 50); do pid_alive "$pid" "$comm" || return 0; sleep 0.1; done
}

if (($# == 0)) && alive slurmctld && [[ -n $(squeue -h -o %A 2>/dev/null) ]]; then
  squeue -h -o %A | xargs -r scancel 2>/dev/null
  for _ in $(seq 1 200); do [[ -z $(squeue -h -o %A 2>/dev/null) ]] && break; sleep 0.1; done
fi
for n in "${names[@]}"; do stop_one "$n"; done
if (($# == 0)); then
  [[ ${RESET:-0} == 1 ]] && rm -rf "$STATE" && echo "slurm: state $STATE deleted"
  echo "slurm: down"
fi
