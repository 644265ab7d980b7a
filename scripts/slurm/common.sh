# Shared settings of the localhost SLURM cluster scripts (sourced, not run).
# Everything the cluster writes lives under $STATE (default /var/tmp/mxsweep-slurm): its own munged
# (own key; on the default socket /run/munge/munge.socket.2, which every slurm client uses), MariaDB
# (own datadir, socket, port), slurmdbd, slurmctld and slurmd, each with a PID file there. Outside it:
# /run/munge and an /etc/slurm/slurm.conf symlink (only if that file is absent) so that plain
# `sinfo`/`sbatch` find this cluster without SLURM_CONF.
STATE=${MXSWEEP_SLURM_STATE:-/var/tmp/mxsweep-slurm}
PORT_CTLD=${MXSWEEP_SLURM_PORT:-6817}  # slurmctld; slurmd = +1, slurmdbd = +2
PORT_D=$((PORT_CTLD + 1))
PORT_DBD=$((PORT_CTLD + 2))
PORT_DB=${MXSWEEP_SLURM_DB_PORT:-3316}  # MariaDB, on 127.0.0.1 only
ETC=$STATE/etc
RUN=$STATE/run
LOG=$STATE/log
MUNGE_DIR=$STATE/munge
DB_DIR=$STATE/mysql
DB_RUN=$STATE/mysql-run
DB_SOCKET=$DB_RUN/mysqld.sock
export SLURM_CONF=$ETC/slurm.conf
PACKAGES="munge slurmctld slurmd slurm-client slurmdbd mariadb-server"
# name : pidfile : the process's /proc/PID/comm
DAEMONS="munged:$MUNGE_DIR/munged.pid:munged mariadbd:$DB_RUN/mariadbd.pid:mariadbd
slurmdbd:$RUN/slurmdbd.pid:slurmdbd slurmctld:$RUN/slurmctld.pid:slurmctld slurmd:$RUN/slurmd.pid:slurmd"

pidfile_of() { local d; for d in $DAEMONS; do [[ ${d%%:*} == "$1" ]] && { d=${d#*:}; echo "${d%%:*}"; }; done; }
comm_of() { local d; for d in $DAEMONS; do [[ ${d%%:*} == "$1" ]] && echo "${d##*:}"; done; }

# pid_alive PID COMM: a live (non-zombie) process of that name (dead daemons linger as zombies here)
pid_alive() {
  [[ -n $1 && -e /proc/$1 ]] && [[ $(cat "/proc/$1/comm" 2>/dev/null) == "$2" ]] &&
    [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}
# alive NAME: the daemon named in $DAEMONS runs, judged by its PID file only
alive() { pid_alive "$(cat "$(pidfile_of "$1")" 2>/dev/null)" "$(comm_of "$1")"; }

# munge works: ours (by PID file) or one already serving the default socket (then it is left alone)
munge_ok() { timeout 10 bash -c 'munge -n | unmunge' >/dev/null 2>&1; }
# up NAME: the daemon is usable
up() { alive "$1" || { [[ $1 == munged ]] && munge_ok; }; }
db() { mariadb --no-defaults -uroot --socket="$DB_SOCKET" "$@"; }
node_state() { timeout 10 sinfo -h -n "$(hostname -s)" -o %T 2>/dev/null | head -1; }
node_up() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", a-b}'; }
