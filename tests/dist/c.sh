#!/usr/bin/env bash
# make test-dist-c: the libaccord tarball as a C user installs it. README's install block (the
# one after `<!-- make test-dist-c runs the next block -->`) runs as written in a fresh
# directory with HOME there and no Rust toolchain on PATH: it extracts the tarball, builds the
# quick start with pkg-config and with CMake's find_package(accord) (shared and static), and
# runs it. Then each program runs again here against its own embedded store, and must load
# the extracted library (or none, for the static one).
#
#   tests/dist/c.sh dist/libaccord-VERSION-linux-x86_64.tar.gz
source "$(dirname "$0")/lib.sh"
tarball=$(realpath "$1")
name=$(basename "$tarball" .tar.gz)
make_work dist-c
mkdir -p "$WORK/home" "$WORK/app"
cp "$tarball" "$WORK/app/"
cd "$WORK/app"

# What the tarball holds, exactly (a file lost or added on the way is a change to review).
tar -tzf "$tarball" | grep -v '/$' | sed "s|^$name/||" | sort >"$WORK/contents"
sort >"$WORK/expected" <<LIST
LICENSE
README.md
include/accord.h
lib/cmake/accord/accordConfig.cmake
lib/cmake/accord/accordConfigVersion.cmake
lib/libaccord.a
lib/libaccord.so
lib/libaccord.so.0
lib/libaccord.so.$VERSION
lib/pkgconfig/accord.pc
share/accord/examples/CMakeLists.txt
share/accord/examples/quickstart.c
LIST
diff -u "$WORK/expected" "$WORK/contents" || { echo "the tarball's files differ (- expected, + found)" >&2; exit 1; }

block=$(readme_block test-dist-c)
printf '%s\n' "$block" | sed 's/^/  | /'
env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH -u CMAKE_PREFIX_PATH HOME="$WORK/home" \
  "$REPO/scripts/without-rust.sh" bash -euo pipefail -c "$block" >"$WORK/block.log" 2>&1 || {
  cat "$WORK/block.log" >&2
  echo "README's C install block failed (above)" >&2
  exit 1
}
prefix="$WORK/home/$name"
[ "$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion accord)" = "$VERSION" ] || {
  echo "pkg-config --modversion accord is not $VERSION" >&2
  exit 1
}
for program in quickstart build/quickstart build/quickstart_static; do
  rm -f "$WORK/accord.db"
  env -u LD_LIBRARY_PATH ACCORD_URL="sqlite://$WORK/accord.db" "$REPO/scripts/without-rust.sh" \
    "./$program" >"$WORK/out" 2>&1 || { cat "$WORK/out" >&2; echo "$program failed" >&2; exit 1; }
  expect_quickstart_output "$WORK/out"
  # realpath -s (normalised, symlinks kept): the pkg-config rpath is
  # <prefix>/lib/pkgconfig/../../lib, as accord.pc says.
  loads=$(env -u LD_LIBRARY_PATH ldd "$program" | awk '$1 ~ /^libaccord/ { print $3 }')
  [ -z "$loads" ] || loads=$(realpath -s "$loads")
  case "$program" in
    *_static) want="" ;;
    *) want="$prefix/lib/libaccord.so.0" ;;
  esac
  [ "$loads" = "$want" ] || {
    echo "$program loads libaccord from '${loads:-nowhere}', not '${want:-nowhere}'" >&2
    exit 1
  }
  echo "ok: $program (${want:-static}) against sqlite"
done
