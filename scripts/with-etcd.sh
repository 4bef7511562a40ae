#!/usr/bin/env bash
# Runs a command with ACCORD_TEST_ETCD_URL naming an etcd cluster: the one already named by the
# environment, or a throwaway 3-member cluster started here on loopback (free ports, data on
# tmpfs where there is one) and stopped when the command ends, whether it passes or fails.
#
# The server is the system's `etcd` (Debian: `apt-get install etcd-server`, 3.4), or the one
# ETCD_BIN names, e.g. a current 3.6 built by `make etcd-3.6`:
#   ETCD_BIN=target/etcd-3.6/etcd scripts/with-etcd.sh cargo test -p accord-coord --features etcd
#
# For the member-failure tests, ACCORD_TEST_ETCD_MEMBERS names a file with one line per member,
# tab-separated: name, client address (host:port), peer address, pid file, data folder, and a
# start script. The start script starts that member in the background and writes its pid file;
# it serves the first start and every restart after a kill (a member with a data folder ignores
# the --initial-cluster flags and rejoins with what it stored).
#
# Unless ACCORD_TEST_ETCD_SECURE=0, two more 3-member clusters start beside it, for
# core/tests/etcd_secure.rs: one serving TLS to clients with a certificate signed by a throwaway
# CA (ACCORD_TEST_ETCD_TLS_URL, an etcds:// URL with cacert=, cert=, key=; the certificates in
# ACCORD_TEST_ETCD_TLS_DIR, with other-ca.pem, a CA that signed nothing), and one with auth
# enabled and 1 s tokens (ACCORD_TEST_ETCD_AUTH_URL, etcd://accord:<password>@…; the user may
# read and write /accord-test/ only).
set -euo pipefail

if [ -n "${ACCORD_TEST_ETCD_URL:-}" ]; then
  "$@"
  exit $?
fi

etcd_bin=${ETCD_BIN:-$(command -v etcd || true)}
if [ -z "$etcd_bin" ] || [ ! -x "$etcd_bin" ]; then
  echo "with-etcd: no etcd server found (apt-get install etcd-server, or ETCD_BIN=path; make etcd-3.6 builds one)" >&2
  exit 1
fi
etcd_bin=$(cd "$(dirname "$etcd_bin")" && pwd)/$(basename "$etcd_bin")
version=$("$etcd_bin" --version | sed -n 's/^etcd Version: //p')

# Data on tmpfs: etcd fsyncs its WAL on every write, and the throwaway cluster needs no
# durability beyond a killed process (the page cache keeps what a kill -9 interrupts).
# ETCD_DATA_BASE names another folder: the benchmark puts the data on disk, where
# PostgreSQL's is, so that both stores pay for their fsyncs.
base=${TMPDIR:-/tmp}
if [ -d /dev/shm ] && [ -w /dev/shm ]; then base=/dev/shm; fi
base=${ETCD_DATA_BASE:-$base}
tmp=$(mktemp -d "$base/accord-etcd.XXXXXX")

# Free ports: a client and a peer port for each member of each cluster, from below the
# ephemeral range (scripts/free-ports.py says why: a killed member restarts on its ports).
nclusters=1
if [ "${ACCORD_TEST_ETCD_SECURE:-1}" != 0 ]; then nclusters=3; fi
read -r -a ports <<<"$(python3 "$(dirname "$0")/free-ports.py" "$((6 * nclusters))")"

pids=()
stop() {
  for pid in "${pids[@]}"; do
    if [ -f "$pid" ]; then kill -9 "$(cat "$pid")" 2>/dev/null || true; fi
  done
  rm -rf "$tmp"
}
trap stop EXIT INT TERM

# start_cluster LABEL MODE FIRST_PORT: starts a 3-member cluster in $tmp/LABEL (ports from
# index FIRST_PORT of $ports) and sets $clients to its client addresses. MODE is plain, tls
# (clients must show a certificate signed by $tmp/certs/ca.pem) or auth (a short token ttl;
# auth is enabled by enable_auth once the cluster is healthy).
start_cluster() {
  local label=$1 mode=$2 first=$3 scheme=http extra=""
  case $mode in
    tls)
      scheme=https
      extra="--cert-file $tmp/certs/server.pem --key-file $tmp/certs/server-key.pem"
      extra+=" --client-cert-auth --trusted-ca-file $tmp/certs/ca.pem"
      ;;
    # etcd's simple tokens expire after --auth-token-ttl seconds unused (default 300): 1 s
    # makes the client's re-authentication happen within a test.
    auth) extra="--auth-token simple --auth-token-ttl 1" ;;
  esac
  local names=(m1 m2 m3) initial="" i
  for i in 0 1 2; do
    initial+="${initial:+,}${names[$i]}=http://127.0.0.1:${ports[$((first + 2 * i + 1))]}"
  done
  : >"$tmp/$label/members"
  clients=()
  for i in 0 1 2; do
    local name=${names[$i]}
    local client=127.0.0.1:${ports[$((first + 2 * i))]}
    local peer=127.0.0.1:${ports[$((first + 2 * i + 1))]}
    local dir=$tmp/$label/$name
    mkdir -p "$dir"
    pids+=("$dir/pid")
    # The settings accord relies on (docs/deployment.md):
    # --max-txn-ops: a batched offer or claim is one transaction with a compare and a put per
    #   key (up to 5,000 keys offered, 10,000 permits); etcd's default allows 128 operations.
    # --max-request-bytes: 10 MiB (etcd's suggested ceiling; the default is 1.5 MiB), for those
    #   batches with their metadata (64 KiB at most per key).
    # --auto-compaction-*: periodic, 1h: nothing is compacted during a test run, so a resumed
    #   watch misses nothing unless a test compacts on purpose (then the client must report it).
    # --quota-backend-bytes: etcd's default (2 GiB), stated so that 3.4 and 3.6 agree.
    # --election-timeout: 2.5 s rather than 1 s, so that a loaded 2-core test machine does not
    #   see leader changes that no test caused.
    # --pre-vote: a member restarted after a kill asks the others whether it could win before it
    #   raises the term, so its return does not depose a leader the others still follow (an
    #   election no test caused, which a 6 s lease may not outlive). 3.6's default; 3.4's is off.
    cat >"$dir/start" <<START
#!/bin/sh
# Starts member $name of the throwaway cluster in the background; its pid goes to $dir/pid.
"$etcd_bin" --name $name --data-dir "$dir/data" \\
  --listen-client-urls $scheme://$client --advertise-client-urls $scheme://$client \\
  --listen-peer-urls http://$peer --initial-advertise-peer-urls http://$peer \\
  --initial-cluster $initial --initial-cluster-state new \\
  --initial-cluster-token accord-test-$label-${tmp##*.} \\
  --max-txn-ops 10240 --max-request-bytes 10485760 \\
  --auto-compaction-mode periodic --auto-compaction-retention 1h \\
  --quota-backend-bytes 2147483648 \\
  --heartbeat-interval 100 --election-timeout 2500 --pre-vote $extra \\
  >>"$dir/log" 2>&1 </dev/null &
echo \$! >"$dir/pid"
START
    chmod +x "$dir/start"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$client" "$peer" "$dir/pid" "$dir/data" "$dir/start" \
      >>"$tmp/$label/members"
    clients+=("$client")
  done
  for name in "${names[@]}"; do "$tmp/$label/$name/start"; done
}

# healthy LABEL SCHEME CLIENT…: waits until every member answers /health with true, which it
# does once it has a leader (over TLS with the test's client certificate).
healthy() {
  local label=$1 scheme=$2
  shift 2
  if ! python3 - "$scheme" "$tmp/certs" "$@" <<'PY'; then
import json, ssl, sys, time, urllib.request
scheme, tls = sys.argv[1], sys.argv[2]
context = None
if scheme == "https":
    context = ssl.create_default_context(cafile=f"{tls}/ca.pem")
    context.load_cert_chain(f"{tls}/client.pem", f"{tls}/client-key.pem")
deadline = time.monotonic() + 60
pending = list(sys.argv[3:])
while pending and time.monotonic() < deadline:
    for client in list(pending):
        try:
            with urllib.request.urlopen(f"{scheme}://{client}/health", timeout=2, context=context) as r:
                if json.load(r).get("health") == "true":
                    pending.remove(client)
        except OSError:
            pass
    if pending:
        time.sleep(0.1)
sys.exit(1 if pending else 0)
PY
    for log in "$tmp/$label"/m*/log; do echo "== $log" >&2; tail -n 20 "$log" >&2; done
    echo "with-etcd: the $label cluster did not become healthy within 60 s" >&2
    exit 1
  fi
}

# A throwaway CA, a server certificate for loopback (and the name etcd.accord.test, which no
# host resolves: the tests give it as server_name), a client certificate, and a second CA that
# signed nothing the members show (the tests' wrong CA).
make_certs() {
  local d=$tmp/certs
  mkdir -p "$d"
  (
    cd "$d"
    ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    for ca in ca other-ca; do
      # shellcheck disable=SC2086
      openssl req -x509 $ec -keyout $ca-key.pem -out $ca.pem -days 2 -subj "/CN=accord test $ca" 2>/dev/null
    done
    # shellcheck disable=SC2086
    openssl req $ec -keyout server-key.pem -out server.csr -subj "/CN=etcd" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:etcd.accord.test\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
      -extfile server.ext -out server.pem 2>/dev/null
    # shellcheck disable=SC2086
    openssl req $ec -keyout client-key.pem -out client.csr -subj "/CN=accord" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
      -extfile client.ext -out client.pem 2>/dev/null
  )
}

# enable_auth CLIENT PASSWORD: through the member's JSON gateway (no etcdctl needed), the root
# user and role that `auth enable` requires, a user `accord` whose role may read and write
# /accord-test/… only (what accord needs: its prefix), then auth on.
enable_auth() {
  python3 - "$1" "$2" <<'PY'
import base64, json, sys, urllib.request
client, password = sys.argv[1], sys.argv[2]
b64 = lambda s: base64.b64encode(s.encode()).decode()
def call(path, body):
    request = urllib.request.Request(f"http://{client}/v3/auth/{path}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        r.read()
call("role/add", {"name": "root"})
call("user/add", {"name": "root", "password": password})
call("user/grant", {"user": "root", "role": "root"})
call("role/add", {"name": "accord"})
call("role/grant", {"name": "accord", "perm": {"permType": "READWRITE",
     "key": b64("/accord-test/"), "range_end": b64("/accord-test0")}})
call("user/add", {"name": "accord", "password": password})
call("user/grant", {"user": "accord", "role": "accord"})
call("enable", {})
PY
}

mkdir -p "$tmp/plain"
start_cluster plain plain 0
plain=("${clients[@]}")
if [ "$nclusters" = 3 ]; then
  make_certs
  mkdir -p "$tmp/tls" "$tmp/auth"
  start_cluster tls tls 6
  tls_clients=("${clients[@]}")
  start_cluster auth auth 12
  auth_clients=("${clients[@]}")
fi
healthy plain http "${plain[@]}"
if [ "$nclusters" = 3 ]; then
  healthy tls https "${tls_clients[@]}"
  healthy auth http "${auth_clients[@]}"
  password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
  enable_auth "${auth_clients[0]}" "$password"
  q="cacert=$tmp/certs/ca.pem&cert=$tmp/certs/client.pem&key=$tmp/certs/client-key.pem"
  export ACCORD_TEST_ETCD_TLS_URL="etcds://$(IFS=,; echo "${tls_clients[*]}")?$q"
  export ACCORD_TEST_ETCD_TLS_DIR="$tmp/certs"
  export ACCORD_TEST_ETCD_AUTH_URL="etcd://accord:$password@$(IFS=,; echo "${auth_clients[*]}")"
  export ACCORD_TEST_ETCD_AUTH_MEMBERS="$tmp/auth/members"
fi
clients=("${plain[@]}")

export ACCORD_TEST_ETCD_URL="etcd://$(IFS=,; echo "${clients[*]}")"
export ACCORD_TEST_ETCD_MEMBERS="$tmp/plain/members"
export ACCORD_TEST_ETCD_VERSION="$version"
echo "with-etcd: throwaway etcd $version cluster on ${clients[*]} ($tmp)" >&2
set +e
"$@"
status=$?
set -e
exit $status
