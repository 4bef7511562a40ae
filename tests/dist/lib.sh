# Shared by the installed-package tests (tests/dist/*.sh, run by mk/dist.mk's test-dist-*).
# Each installs an artifact of dist/ in a fresh directory under /tmp and runs a quick start
# against the embedded store, as a user who follows README.md would.

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n 1)

# readme_block NAME: the fenced block of README.md that follows the line
# `<!-- make NAME runs the next block -->`, so that the install lines the README shows are the
# ones the test runs. Fails when the marker or its block is missing.
readme_block() {
  local block
  block=$(awk -v marker="<!-- make $1 runs the next block -->" '
    $0 == marker { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$REPO/README.md")
  if [ -z "$block" ]; then
    echo "README.md has no block after '<!-- make $1 runs the next block -->'" >&2
    return 1
  fi
  printf '%s\n' "$block"
}

# expect_quickstart_output FILE: what every quick start prints (a lease, then the message).
expect_quickstart_output() {
  grep -Eq '^holding [^ ]+ with fence [0-9]+$' "$1" && grep -qx 'jobs: report ready' "$1" || {
    echo "unexpected quick start output ($1):" >&2
    cat "$1" >&2
    return 1
  }
}

# make_work NAME: WORK becomes a fresh directory under /tmp, removed on exit unless
# KEEP_DIST_TMP is set (to look at a failure). Called in the test's own shell, not in $(…):
# the trap belongs to the shell that exits.
make_work() {
  WORK=$(mktemp -d "/tmp/accord-$1.XXXXXX")
  if [ -z "${KEEP_DIST_TMP:-}" ]; then
    # shellcheck disable=SC2064  # expand now: the trap removes this very directory
    trap "rm -rf '$WORK'" EXIT
  else
    echo "keeping $WORK"
  fi
}
