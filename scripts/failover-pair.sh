#!/usr/bin/env bash
# A throwaway primary with a synchronous streaming standby, for the failover tests (O2).
#
#   scripts/failover-pair.sh run CMD...      start the pair, run CMD, remove the pair
#   scripts/failover-pair.sh primary         which node (a or b) is the primary now
#   scripts/failover-pair.sh stop NODE MODE  pg_ctl stop -m MODE (fast, immediate)
#   scripts/failover-pair.sh start NODE      pg_ctl start of a stopped NODE (as it was)
#   scripts/failover-pair.sh promote NODE    the standby NODE becomes the primary
#   scripts/failover-pair.sh standby NODE    NODE (stopped) is made afresh a synchronous standby
#                                            of the primary (pg_basebackup), and started
#
# `run` exports ACCORD_TEST_FAILOVER_URL: both nodes in one libpq URL with
# target_session_attrs=read-write, so that clients find whichever is the primary;
# ACCORD_TEST_FAILOVER_DIR, where the other subcommands find the pair; and
# ACCORD_TEST_FAILOVER_CTL, this script's path. The primary lists the standby in
# synchronous_standby_names (with synchronous_commit on): a commit is acknowledged only once the
# standby has it, so a promoted standby has every grant any client was told of.
# ACCORD_PAIR_FSYNC=on makes the pair durable (fsync and full_page_writes on; the chaos run,
# chaos/run.py, restarts and crashes the primary); off by default.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"

bindir=$(pg_config --bindir 2>/dev/null || true)
if [ ! -x "$bindir/initdb" ]; then
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi
if [ ! -x "$bindir/initdb" ]; then
  echo "failover-pair: no PostgreSQL server binaries found (pg_config --bindir)" >&2
  exit 1
fi
as_pg=()
[ "$(id -u)" = 0 ] && as_pg=(runuser -u postgres --)


# psql against NODE of the pair in $dir, as the superuser over the local socket.
sql() {
  "${as_pg[@]}" "$bindir/psql" -X -q -At -h "$dir" -p "$(cat "$dir/$1.port")" -U postgres \
    -d postgres -c "$2"
}

primary() {
  for node in a b; do
    if [ "$(sql "$node" 'SELECT pg_is_in_recovery()' 2>/dev/null || true)" = f ]; then
      echo "$node"
      return 0
    fi
  done
  echo "failover-pair: no primary is running" >&2
  return 1
}

# Makes NODE a synchronous standby of the current primary and waits until the primary counts it
# as synchronous.
standby() {
  local node=$1 from
  from=$(primary)
  "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/$node" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "${dir:?}/$node"
  "${as_pg[@]}" env PGPASSWORD="$(cat "$dir/password")" \
    "$bindir/pg_basebackup" -h 127.0.0.1 -p "$(cat "$dir/$from.port")" -U postgres \
    -D "$dir/$node" -X stream -R --no-sync --checkpoint=fast >"$dir/$node.basebackup.log" 2>&1 \
    || { cat "$dir/$node.basebackup.log" >&2; exit 1; }
  cat >>"$dir/$node/postgresql.conf" <<CONF
port = $(cat "$dir/$node.port")
CONF
  cat >>"$dir/$node/postgresql.auto.conf" <<CONF
primary_conninfo = 'host=127.0.0.1 port=$(cat "$dir/$from.port") user=postgres password=$(cat "$dir/password") application_name=$node'
synchronous_standby_names = ''
wal_retrieve_retry_interval = '500ms'
CONF
  "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/$node" -l "$dir/$node.log" -w -t 60 start >/dev/null \
    || { cat "$dir/$node.log" >&2; exit 1; }
  sql "$from" "ALTER SYSTEM SET synchronous_standby_names = '$node'" >/dev/null
  sql "$from" "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 1 300); do
    if [ "$(sql "$from" "SELECT count(*) FROM pg_stat_replication WHERE application_name = '$node' AND sync_state = 'sync' AND state = 'streaming'")" = 1 ]; then
      return 0
    fi
    sleep 0.1
  done
  echo "failover-pair: $node did not become a synchronous standby of $from" >&2
  exit 1
}

case "${1:-}" in
  run)
    shift
    dir=$(mktemp -d "${TMPDIR:-/tmp}/accord-pair.XXXXXX")
    [ ${#as_pg[@]} -gt 0 ] && chown postgres: "$dir"
    cleanup() {
      for node in a b; do
        "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/$node" -m immediate stop >/dev/null 2>&1 || true
      done
      rm -rf "$dir"
    }
    trap cleanup EXIT INT TERM
    echo "accord-pair-$RANDOM$RANDOM" >"$dir/password"
    # From below the ephemeral range (free-ports.py says why): a node restarts on its port.
    read -r a_port b_port <<<"$(python3 "$here/free-ports.py" 2)"
    echo "$a_port" >"$dir/a.port"
    echo "$b_port" >"$dir/b.port"
    [ ${#as_pg[@]} -gt 0 ] && chown postgres: "$dir/password"
    "${as_pg[@]}" "$bindir/initdb" -D "$dir/a" -U postgres --pwfile="$dir/password" \
      --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    # fsync off keeps the suite fast; what the tests judge is replication, which a stopped
    # (never restarted) primary does not need fsync for. The chaos run turns it on.
    fsync=${ACCORD_PAIR_FSYNC:-off}
    cat >>"$dir/a/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $(cat "$dir/a.port")
unix_socket_directories = '$dir'
fsync = $fsync
full_page_writes = $fsync
synchronous_commit = on
wal_level = replica
max_wal_senders = 10
wal_keep_size = '64MB'
max_connections = 100
CONF
    "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/a" -l "$dir/a.log" -w -t 60 start >/dev/null \
      || { cat "$dir/a.log" >&2; exit 1; }
    standby b
    password=$(cat "$dir/password")
    export ACCORD_TEST_FAILOVER_URL="postgres://postgres:$password@127.0.0.1:$(cat "$dir/a.port"),127.0.0.1:$(cat "$dir/b.port")/postgres?target_session_attrs=read-write"
    export ACCORD_TEST_FAILOVER_DIR="$dir"
    export ACCORD_TEST_FAILOVER_CTL="$self"
    echo "failover-pair: primary a on 127.0.0.1:$(cat "$dir/a.port"), synchronous standby b on 127.0.0.1:$(cat "$dir/b.port") ($dir)" >&2
    set +e
    "$@"
    status=$?
    set -e
    exit $status
    ;;
  primary | stop | start | promote | standby)
    dir=${ACCORD_TEST_FAILOVER_DIR:?"run under scripts/failover-pair.sh run"}
    # A node's name goes into SQL (application_name, synchronous_standby_names): only a or b.
    case "${2:-a}" in a | b) ;; *) echo "failover-pair: no node ${2:-} (a or b)" >&2; exit 2 ;; esac
    case "$1" in
      primary) primary ;;
      stop)
        "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/$2" -m "${3:-fast}" -w -t 60 stop >/dev/null ;;
      start)
        "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/$2" -l "$dir/$2.log" -w -t 60 start >/dev/null ;;
      promote)
        "${as_pg[@]}" "$bindir/pg_ctl" -D "$dir/$2" -w -t 60 promote >/dev/null ;;
      standby) standby "$2" ;;
    esac
    ;;
  *)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
