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

# Six distinct free ports: a client and a peer port for each member.
read -r -a ports <<<"$(python3 -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"

names=(m1 m2 m3)
initial=""
for i in 0 1 2; do
  initial+="${initial:+,}${names[$i]}=http://127.0.0.1:${ports[$((2 * i + 1))]}"
done

stop() {
  for name in "${names[@]}"; do
    if [ -f "$tmp/$name/pid" ]; then kill -9 "$(cat "$tmp/$name/pid")" 2>/dev/null || true; fi
  done
  rm -rf "$tmp"
}
trap stop EXIT INT TERM

: >"$tmp/members"
clients=()
for i in 0 1 2; do
  name=${names[$i]}
  client=127.0.0.1:${ports[$((2 * i))]}
  peer=127.0.0.1:${ports[$((2 * i + 1))]}
  dir=$tmp/$name
  mkdir -p "$dir"
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
  cat >"$dir/start" <<START
#!/bin/sh
# Starts member $name of the throwaway cluster in the background; its pid goes to $dir/pid.
"$etcd_bin" --name $name --data-dir "$dir/data" \\
  --listen-client-urls http://$client --advertise-client-urls http://$client \\
  --listen-peer-urls http://$peer --initial-advertise-peer-urls http://$peer \\
  --initial-cluster $initial --initial-cluster-state new \\
  --initial-cluster-token accord-test-${tmp##*.} \\
  --max-txn-ops 10240 --max-request-bytes 10485760 \\
  --auto-compaction-mode periodic --auto-compaction-retention 1h \\
  --quota-backend-bytes 2147483648 \\
  --heartbeat-interval 100 --election-timeout 2500 \\
  >>"$dir/log" 2>&1 </dev/null &
echo \$! >"$dir/pid"
START
  chmod +x "$dir/start"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$client" "$peer" "$dir/pid" "$dir/data" "$dir/start" \
    >>"$tmp/members"
  clients+=("$client")
done

for name in "${names[@]}"; do "$tmp/$name/start"; done

# Healthy: every member answers /health with true, which it does once it has a leader.
if ! python3 - "${clients[@]}" <<'PY'; then
import json, sys, time, urllib.request
deadline = time.monotonic() + 60
pending = list(sys.argv[1:])
while pending and time.monotonic() < deadline:
    for client in list(pending):
        try:
            with urllib.request.urlopen(f"http://{client}/health", timeout=2) as r:
                if json.load(r).get("health") == "true":
                    pending.remove(client)
        except OSError:
            pass
    if pending:
        time.sleep(0.1)
sys.exit(1 if pending else 0)
PY
  for name in "${names[@]}"; do echo "== $name" >&2; tail -n 20 "$tmp/$name/log" >&2; done
  echo "with-etcd: the cluster did not become healthy within 60 s" >&2
  exit 1
fi

export ACCORD_TEST_ETCD_URL="etcd://$(IFS=,; echo "${clients[*]}")"
export ACCORD_TEST_ETCD_MEMBERS="$tmp/members"
export ACCORD_TEST_ETCD_VERSION="$version"
echo "with-etcd: throwaway etcd $version cluster on ${clients[*]} ($tmp)" >&2
set +e
"$@"
status=$?
set -e
exit $status
