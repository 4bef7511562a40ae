#!/usr/bin/env bash
# make test-dist-go: the Go module as a Go user gets it, with no Rust toolchain on PATH. A fresh
# GOPATH and module cache, GOPROXY=file://dist/goproxy (what a release publishes: the module
# with its prebuilt libaccord.a), a new module in which README's Go install block (after
# `<!-- make test-dist-go runs the next block -->`) runs as written; then the Go quick start
# (examples/go/main.go) is built and run against an embedded store. Then the same program with
# `-tags accord_pkgconfig` against the extracted libaccord tarball: it must load that library.
#
#   tests/dist/go.sh dist/goproxy dist/libaccord-VERSION-linux-x86_64.tar.gz
source "$(dirname "$0")/lib.sh"
proxy=$(realpath "$1")
tarball=$(realpath "$2")
module=$(sed -n 's/^module //p' "$REPO/bindings/go/go.mod")
make_work dist-go
mkdir -p "$WORK/app" "$WORK/c"

# Nothing of the user's Go setup: no go env file, no private-module settings, no toolchain
# download; the checksum database is not asked about an unpublished module (go.sum is still
# written and checked against the zip). GOCACHE stays: it is keyed by content and paths, and
# the module's path here is new.
export GOENV=off GOPATH="$WORK/gopath" GOMODCACHE="$WORK/gopath/pkg/mod" GOFLAGS=-mod=mod \
  GOPROXY="file://$proxy" GONOSUMDB="$module" GONOPROXY= GOPRIVATE= GOTOOLCHAIN=local \
  GO111MODULE=on CGO_ENABLED=1
unset GOWORK CGO_CFLAGS CGO_LDFLAGS PKG_CONFIG_PATH LD_LIBRARY_PATH

cd "$WORK/app"
go mod init example.com/quickstart >/dev/null 2>&1
block=$(readme_block test-dist-go)
printf '%s\n' "$block" | sed 's/^/  | /'
"$REPO/scripts/without-rust.sh" bash -euo pipefail -c "$block" >"$WORK/block.log" 2>&1 || {
  cat "$WORK/block.log" >&2
  echo "README's Go install block failed (above)" >&2
  exit 1
}
grep -Eq "^(require)?[[:space:]]*$module v$VERSION( |\$)" go.mod || {
  echo "go.mod does not require $module v$VERSION:" >&2
  cat go.mod >&2
  exit 1
}
cp "$REPO/examples/go/main.go" .
"$REPO/scripts/without-rust.sh" go build -o quickstart .
"$REPO/scripts/without-rust.sh" env ACCORD_URL="sqlite://$WORK/default.db" ./quickstart >"$WORK/out" 2>&1 ||
  { cat "$WORK/out" >&2; echo "the Go quick start failed" >&2; exit 1; }
expect_quickstart_output "$WORK/out"
if ldd quickstart | grep -q libaccord; then
  echo "the default build loads a shared libaccord; it must link the module's static one" >&2
  exit 1
fi
echo "ok: go get $module@v$VERSION, quick start against sqlite (static libaccord from the module)"

# -tags accord_pkgconfig: the flags come from pkg-config, here the extracted tarball's.
tar -xzf "$tarball" -C "$WORK/c"
prefix="$WORK/c/$(basename "$tarball" .tar.gz)"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" "$REPO/scripts/without-rust.sh" \
  go build -tags accord_pkgconfig -o quickstart_pc .
LD_LIBRARY_PATH="$prefix/lib" "$REPO/scripts/without-rust.sh" \
  env ACCORD_URL="sqlite://$WORK/pkgconfig.db" ./quickstart_pc >"$WORK/out" 2>&1 ||
  { cat "$WORK/out" >&2; echo "the Go quick start (-tags accord_pkgconfig) failed" >&2; exit 1; }
expect_quickstart_output "$WORK/out"
loads=$(LD_LIBRARY_PATH="$prefix/lib" ldd quickstart_pc | awk '$1 ~ /^libaccord/ { print $3 }')
[ "$loads" = "$prefix/lib/libaccord.so.0" ] || {
  echo "quickstart_pc loads libaccord from '${loads:-nowhere}', not the tarball's" >&2
  exit 1
}
echo "ok: -tags accord_pkgconfig against the tarball's libaccord.so"
