#!/usr/bin/env bash
# Start a real one-node SLURM cluster on localhost: munged, MariaDB, slurmdbd (so `sacct` works),
# slurmctld and slurmd, with their state, logs and PID files under $MXSWEEP_SLURM_STATE
# (default /var/tmp/mxsweep-slurm; see common.sh).
# Idempotent: installs the Debian packages only if missing; if every daemon is up with the same
# config it does nothing (~0.3 s); a daemon that died is started again; a changed config restarts all.
# A cold start (slurmctld not running) forgets all earlier jobs (job state and accounting DB),
# so job ids restart at 1 without colliding with old sacct rows; KEEP_STATE=1 keeps them.
# Prints `export SLURM_CONF=...` last: the client commands and submitit need it unless
# /etc/slurm/slurm.conf (linked here when that file is absent) already points at this cluster.
# Stop with scripts/slurm/stop.sh (by PID files); see scripts/slurm/status.sh.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/common.sh"
T0=$(now)
bash "$HERE/install.sh"
T1=$(now)

mkdir -p "$STATE" "$ETC" "$RUN" "$LOG" "$STATE/spool"
exec 9>"$STATE/lock"  # every daemon below is started with 9>&- so that none inherits the lock
flock -w 300 9 || { echo "start.sh: $STATE/lock is held by another start/stop" >&2; exit 1; }
export MXSWEEP_SLURM_LOCKED=1
cd /  # daemons must not hold the caller's directory

# ---- config -----------------------------------------------------------------------------------
[[ -s $ETC/db.pass ]] || (umask 077 && od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$ETC/db.pass")
render() {
  sed -e "s|@STATE@|$STATE|g" -e "s|@NODE@|$(hostname -s)|g" -e "s|@CPUS@|$(nproc)|g" \
    -e "s|@MEM_MB@|$(($(free -m | awk '/^Mem:/{print $2}') * 9 / 10))|g" \
    -e "s|@PORT_CTLD@|$PORT_CTLD|g" -e "s|@PORT_D@|$PORT_D|g" -e "s|@PORT_DBD@|$PORT_DBD|g" \
    -e "s|@PORT_DB@|$PORT_DB|g" -e "s|@DB_PASS@|$(cat "$ETC/db.pass")|g" "$HERE/$1.in"
}
changed=0
for f in slurm.conf slurmdbd.conf; do
  (umask 077 && render "$f" >"$ETC/$f.new")
  if cmp -s "$ETC/$f.new" "$ETC/$f"; then rm "$ETC/$f.new"; else changed=1; fi
done
all_up=1
for d in $DAEMONS; do up "${d%%:*}" || all_up=0; done
if ((changed == 0 && all_up == 1)) && node_up; then
  echo "slurm: already up ($(secs "$(now)" "$T0") s; $(bash "$HERE/status.sh" --short))"
  echo "export SLURM_CONF=$SLURM_CONF"
  exit 0
fi
if ((changed)); then
  for d in $DAEMONS; do alive "${d%%:*}" && { bash "$HERE/stop.sh" 9>&-; break; }; done
  for f in slurm.conf slurmdbd.conf; do [[ -f $ETC/$f.new ]] && mv "$ETC/$f.new" "$ETC/$f"; done
fi
chmod 600 "$ETC/slurmdbd.conf"  # slurmdbd refuses a conf others can read
chmod 644 "$ETC/slurm.conf"

cold=0
if ! alive slurmctld; then
  cold=1
  # a half-up cluster: the slurmd/slurmdbd of an old controller go too, so the fresh state is consistent
  for n in slurmd slurmdbd; do if alive "$n"; then bash "$HERE/stop.sh" "$n" 9>&-; fi; done
  [[ ${KEEP_STATE:-0} == 1 ]] || rm -rf "$STATE/spool/ctld" "$STATE/spool/d"
fi
mkdir -p "$STATE/spool/ctld" "$STATE/spool/d"

# ---- munged: own key and PID file, default socket (unless a munged already serves it) ----------
mkdir -p "$MUNGE_DIR" /run/munge
chown munge:munge "$MUNGE_DIR" /run/munge
chmod 0755 "$MUNGE_DIR" /run/munge
if [[ ! -s $MUNGE_DIR/munge.key ]]; then
  mungekey --create --keyfile="$MUNGE_DIR/munge.key"
  chown munge:munge "$MUNGE_DIR/munge.key"
  chmod 0600 "$MUNGE_DIR/munge.key"
fi
if ! alive munged && { [[ ! -S /run/munge/munge.socket.2 ]] || ! munge_ok; }; then  # probe: a stale socket costs ~5 s
  runuser -u munge -- /usr/sbin/munged --key-file="$MUNGE_DIR/munge.key" \
    --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
    --seed-file="$MUNGE_DIR/munged.seed" </dev/null >>"$LOG/munged.out" 2>&1 9>&-
fi
munge_ok || { echo "start.sh: munge does not work; see $MUNGE_DIR/munged.log" >&2; exit 1; }
T2=$(now)

# ---- MariaDB: own datadir, socket and port on 127.0.0.1 ----------------------------------------
mkdir -p "$DB_RUN"
touch "$LOG/mariadbd.log"
chown mysql:mysql "$DB_RUN" "$LOG/mariadbd.log"
if ! alive mariadbd; then
  if [[ ! -d $DB_DIR/mysql ]]; then
    rm -rf "$DB_DIR"
    mariadb-install-db --no-defaults --user=mysql --datadir="$DB_DIR" --skip-test-db \
      --auth-root-authentication-method=socket >"$LOG/mariadb-install-db.out" 2>&1 9>&- ||
      { cat "$LOG/mariadb-install-db.out" >&2; exit 1; }
  fi
  setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB_DIR" --socket="$DB_SOCKET" \
    --pid-file="$DB_RUN/mariadbd.pid" --port="$PORT_DB" --bind-address=127.0.0.1 \
    --log-error="$LOG/mariadbd.log" --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 \
    --innodb-flush-log-at-trx-commit=2 </dev/null >>"$LOG/mariadbd.out" 2>&1 9>&- &
  for _ in $(seq 1 600); do timeout 5 mariadb-admin --no-defaults -uroot --socket="$DB_SOCKET" ping \
    >/dev/null 2>&1 && break; sleep 0.1; done
  db -e 'select 1' >/dev/null || { tail -n 20 "$LOG/mariadbd.log" >&2; exit 1; }
fi
if ((cold)) && [[ ${KEEP_STATE:-0} != 1 ]]; then db -e 'DROP DATABASE IF EXISTS slurm_acct_db'; fi
pass=$(cat "$ETC/db.pass")
sql="CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
for h in localhost 127.0.0.1; do
  sql+="CREATE USER IF NOT EXISTS 'slurm'@'$h' IDENTIFIED BY '$pass';"
  sql+="ALTER USER 'slurm'@'$h' IDENTIFIED BY '$pass'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'$h';"
done
db -e "$sql"
T3=$(now)

# ---- slurmdbd, slurmctld, slurmd (each forks into the background) ------------------------------
wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll COMMAND until it succeeds
  local t=$1 what=$2 end
  shift 2
  end=$(($(date +%s) + t))
  while (($(date +%s) < end)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "start.sh: $what did not come up in ${t}s; see $LOG" >&2
  return 1
}
if ! alive slurmdbd; then
  slurmdbd </dev/null >>"$LOG/slurmdbd.out" 2>&1 9>&-
  wait_for 60 slurmdbd timeout 5 sacctmgr -n list cluster || { tail -n 20 "$LOG/slurmdbd.log" >&2; exit 1; }
fi
T4=$(now)
alive slurmctld || slurmctld </dev/null >>"$LOG/slurmctld.out" 2>&1 9>&-
alive slurmd || slurmd </dev/null >>"$LOG/slurmd.out" 2>&1 9>&-
if ! wait_for 60 "node $(hostname -s)" node_up; then
  sinfo >&2
  tail -n 20 "$LOG/slurmctld.log" "$LOG/slurmd.log" >&2
  exit 1
fi
T5=$(now)

# plain `sinfo`/`sbatch` (no SLURM_CONF) find this cluster, unless /etc/slurm/slurm.conf is someone else's
if [[ ! -e /etc/slurm/slurm.conf || $(readlink /etc/slurm/slurm.conf 2>/dev/null) == "$SLURM_CONF" ]]; then
  { mkdir -p /etc/slurm && ln -sfn "$SLURM_CONF" /etc/slurm/slurm.conf; } 2>/dev/null || true
fi
kind=warm
((cold)) && kind=cold
echo "slurm up ($kind): packages $(secs "$T1" "$T0")s, munge $(secs "$T2" "$T1")s," \
  "mariadb $(secs "$T3" "$T2")s, slurmdbd $(secs "$T4" "$T3")s, slurmctld+slurmd $(secs "$T5" "$T4")s," \
  "total $(secs "$T5" "$T0")s; state in $STATE"
echo "export SLURM_CONF=$SLURM_CONF"
