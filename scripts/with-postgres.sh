#!/usr/bin/env bash
# Runs a command with ACCORD_TEST_DATABASE_URL naming a PostgreSQL server: the one already named
# by the environment, or a throwaway cluster started here (initdb in a temporary folder, a free
# port, fsync off) and stopped when the command ends, whether it passes or fails.
#
# For the fault tests the cluster's folder and binaries are exported too
# (ACCORD_TEST_PGDATA, ACCORD_TEST_PG_BINDIR), so a test can restart the server. The same server
# over its Unix socket (trust, no password exchange) is ACCORD_TEST_SOCKET_URL: the C tests under
# valgrind connect there (mk/c.mk says why).
set -euo pipefail

if [ -n "${ACCORD_TEST_DATABASE_URL:-}" ]; then
  "$@"
  exit $?
fi

bindir=$(pg_config --bindir 2>/dev/null || true)
if [ ! -x "$bindir/initdb" ]; then
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
fi
if [ ! -x "$bindir/initdb" ]; then
  echo "with-postgres: no PostgreSQL server binaries found (pg_config --bindir)" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/accord-pg.XXXXXX")
as_pg=()
if [ "$(id -u)" = 0 ]; then
  # The server refuses to run as root.
  chown postgres: "$tmp"
  as_pg=(runuser -u postgres --)
fi

# From below the ephemeral range (scripts/free-ports.py says why): tests restart the server.
read -r port bport <<<"$(python3 "$(dirname "$0")/free-ports.py" 2)"
password="accord-test-$RANDOM$RANDOM"
echo "$password" >"$tmp/pwfile"
[ ${#as_pg[@]} -gt 0 ] && chown postgres: "$tmp/pwfile"

stop() {
  if [ -f "$tmp/pgbouncer.pid" ]; then kill "$(cat "$tmp/pgbouncer.pid")" 2>/dev/null || true; fi
  "${as_pg[@]}" "$bindir/pg_ctl" -D "$tmp/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap stop EXIT INT TERM

"${as_pg[@]}" "$bindir/initdb" -D "$tmp/data" -U postgres --pwfile="$tmp/pwfile" \
  --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-sync >"$tmp/initdb.log" 2>&1 \
  || { cat "$tmp/initdb.log" >&2; exit 1; }
cat >>"$tmp/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$tmp'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 400
shared_preload_libraries = 'pg_stat_statements'
CONF
# TLS with a throwaway CA, so that the sslmode tests run against a real TLS server.
ssl_root=""
if command -v openssl >/dev/null 2>&1; then
  (
    cd "$tmp"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=accord test CA" \
      -keyout ca.key -out ca.crt
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >san.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile san.ext -out server.crt
  ) >"$tmp/openssl.log" 2>&1 && {
    chmod 600 "$tmp/server.key"
    [ ${#as_pg[@]} -gt 0 ] && chown postgres: "$tmp/server.key" "$tmp/server.crt"
    printf "ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\n" "$tmp/server.crt" "$tmp/server.key" \
      >>"$tmp/data/postgresql.conf"
    ssl_root="$tmp/ca.crt"
  }
fi

"${as_pg[@]}" "$bindir/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w -t 60 start >/dev/null \
  || { cat "$tmp/server.log" >&2; exit 1; }

export ACCORD_TEST_DATABASE_URL="postgres://postgres:$password@127.0.0.1:$port/postgres"
# The socket's folder as the URL's host, percent-encoded (libpq and tokio-postgres both read a
# host starting with "/" as a socket folder).
export ACCORD_TEST_SOCKET_URL="postgres://postgres@$(printf '%s' "$tmp" | sed 's|/|%2F|g'):$port/postgres"

# PgBouncer in front of it, when the system has one (`apt-get install pgbouncer`): one process,
# three pools over the same database, `session`, `transaction` and `tiny`, for the deployment
# tests (O1).
# `tiny` is a session pool of two server connections, fewer than its test's clients hold
# (a listening connection left waiting for one). The transaction pool has one server connection: PgBouncer before 1.21 does not carry prepared
# statements from one server connection to another (docs/deployment.md), and with one server
# every statement a test's clients prepared is found where it runs.
pgbouncer_bin=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)
if [ -n "$pgbouncer_bin" ]; then
  server="host=127.0.0.1 port=$port dbname=postgres user=postgres password=$password"
  cat >"$tmp/pgbouncer.ini" <<INI
[databases]
session = $server pool_mode=session
transaction = $server pool_mode=transaction pool_size=1
tiny = $server pool_mode=session pool_size=2

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = plain
auth_file = $tmp/userlist.txt
pidfile = $tmp/pgbouncer.pid
logfile = $tmp/pgbouncer.log
max_client_conn = 400
default_pool_size = 40
INI
  printf '"postgres" "%s"\n' "$password" >"$tmp/userlist.txt"
  [ ${#as_pg[@]} -gt 0 ] && chown postgres: "$tmp/pgbouncer.ini" "$tmp/userlist.txt"
  if "${as_pg[@]}" "$pgbouncer_bin" -d "$tmp/pgbouncer.ini" >"$tmp/pgbouncer.out" 2>&1; then
    export ACCORD_TEST_PGBOUNCER_SESSION_URL="postgres://postgres:$password@127.0.0.1:$bport/session"
    export ACCORD_TEST_PGBOUNCER_TRANSACTION_URL="postgres://postgres:$password@127.0.0.1:$bport/transaction"
    export ACCORD_TEST_PGBOUNCER_TINY_SESSION_URL="postgres://postgres:$password@127.0.0.1:$bport/tiny"
  else
    cat "$tmp/pgbouncer.out" >&2
    echo "with-postgres: PgBouncer did not start; the deployment tests will say so" >&2
  fi
fi
export ACCORD_TEST_PGDATA="$tmp/data"
export ACCORD_TEST_PG_BINDIR="$bindir"
export ACCORD_TEST_SSL_ROOT_CERT="$ssl_root"
echo "with-postgres: throwaway PostgreSQL on 127.0.0.1:$port ($tmp)" >&2
set +e
"$@"
status=$?
set -e
exit $status
