#!/usr/bin/env bash
# State of the localhost SLURM cluster: each daemon (by PID file), the node, the queue.
# Exit 0 when every daemon runs and the node is usable, else 3. `--short`: one line, no queue.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
ok=0
line=""
for d in $DAEMONS; do
  n=${d%%:*}
  if alive "$n"; then line+="$n=$(cat "$(pidfile_of "$n")") "; elif up "$n"; then line+="$n=foreign "; else line+="$n=down "; ok=3; fi
done
node=down  # asked only of a live controller: sinfo takes ~10 s to give up on a dead one
if alive slurmctld; then node=$(node_state || true); fi
line+="node=${node:-unknown}"
[[ $node =~ ^(idle|mixed|allocated|completing)$ ]] || ok=3
if [[ ${1:-} == --short ]]; then echo "$line"; exit $ok; fi
echo "state: $STATE   SLURM_CONF=$SLURM_CONF"
echo "$line"
if ((ok == 0)); then sinfo; squeue; fi
exit $ok
