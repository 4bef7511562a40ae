#!/usr/bin/env bash
# `make test-go` (mk/c.mk): the Go package built as a newcomer builds it from a fresh clone, whose
# bindings/go/lib/ holds no libaccord.a (only a released module carries one).
#  1. With default tags, building the Go quick start fails with bindings/go/lib_check.go's
#     message naming what to run, not with the linker's "cannot find …/libaccord.a".
#  2. README.md's pkg-config build (the block after `<!-- make test-go runs the next block -->`)
#     runs as written, with $HOME/.local the installed libaccord given as $1 and no
#     LD_LIBRARY_PATH: the program must find libaccord.so.0 by the rpath the block records.
#
#   tests/go-clone.sh PREFIX      (PREFIX: a `make install PREFIX=…` of libaccord)
source "$(dirname "$0")/dist/lib.sh"
prefix=$(realpath "$1")
[ -f "$prefix/lib/pkgconfig/accord.pc" ] || { echo "no libaccord installed in $prefix" >&2; exit 1; }
make_work go-clone
clone="$WORK/clone"
mkdir -p "$clone" "$WORK/home"
ln -s "$prefix" "$WORK/home/.local"
# The files a clone has (tracked, or new and not ignored): no bindings/go/lib/.
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard -- bindings/go include examples/go |
  xargs -0 cp --parents -t "$clone")
[ ! -e "$clone/bindings/go/lib" ] || { echo "the clone has bindings/go/lib" >&2; exit 1; }
unset CGO_LDFLAGS CGO_CFLAGS PKG_CONFIG_PATH LD_LIBRARY_PATH GOFLAGS

if (cd "$clone/examples/go" && go build -o quickstart .) >"$WORK/default.log" 2>&1; then
  echo "the default-tag build succeeded without bindings/go/lib/linux_amd64/libaccord.a" >&2
  exit 1
fi
if ! grep -q 'Run `make go-lib` in the repository' "$WORK/default.log" ||
  grep -q 'cannot find' "$WORK/default.log"; then
  echo "the default-tag build without libaccord.a does not say what to run:" >&2
  cat "$WORK/default.log" >&2
  exit 1
fi
echo "ok: from a clone, default tags: $(grep -o 'accord: bindings/go/lib/linux_amd64/libaccord.a is missing' "$WORK/default.log" | head -n 1)"

block=$(readme_block test-go)
printf '%s\n' "$block" | sed 's/^/  | /'
(cd "$clone" && HOME="$WORK/home" bash -euo pipefail -c "$block") >"$WORK/out" 2>&1 || {
  cat "$WORK/out" >&2
  echo "README's Go pkg-config block failed (above)" >&2
  exit 1
}
expect_quickstart_output "$WORK/out"
loads=$(ldd "$clone/examples/go/quickstart" | awk '$1 ~ /^libaccord/ { print $3 }')
[ "$loads" = "$(realpath "$prefix/lib/libaccord.so.0")" ] || [ "$loads" = "$prefix/lib/libaccord.so.0" ] || [ "$loads" = "$WORK/home/.local/lib/libaccord.so.0" ] || {
  echo "the pkg-config build loads libaccord from '${loads:-nowhere}', not $prefix/lib" >&2
  exit 1
}
echo "ok: from a clone, -tags accord_pkgconfig with README's line runs (libaccord from $loads)"
