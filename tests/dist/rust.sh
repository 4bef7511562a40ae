#!/usr/bin/env bash
# make test-dist-rust: the packaged crate as a Rust user gets it. A new project whose
# [dependencies] are README's (the block after `<!-- make test-dist-rust runs the next block
# -->`: what `cargo add` writes), with crates.io's accord-coord replaced by the unpacked .crate
# ([patch]: the crate is not published yet, and this is the file `cargo publish` uploads), builds
# the quick start the package ships (examples/quickstart.rs) and runs it against an embedded
# store, and sees an etcd:// URL refused for want of the feature `etcd`. Offline, with the
# workspace's Cargo.lock (the versions the tests ran with), and into the workspace's target/ so
# that the dependencies already built there are reused.
#
#   tests/dist/rust.sh target/package/accord-coord-VERSION.crate
source "$(dirname "$0")/lib.sh"
crate=$(realpath "$1")
make_work dist-rust
tar -xzf "$crate" -C "$WORK"
unpacked="$WORK/$(basename "$crate" .crate)"
[ -f "$unpacked/README.md" ] && [ -f "$unpacked/LICENSE" ] || {
  echo "$crate lacks its README.md or LICENSE" >&2
  exit 1
}

mkdir -p "$WORK/app/src"
cd "$WORK/app"
block=$(readme_block test-dist-rust)
printf '%s\n' "$block" | sed 's/^/  | /'
{
  cat <<'TOML'
[package]
name = "accord-dist-rust-check"
version = "0.0.0"
edition = "2021"
publish = false

TOML
  printf '%s\n' "$block"
  cat <<TOML

[patch.crates-io]
accord-coord = { path = "$unpacked" }

# As the workspace's profile (Cargo.toml), so that its compiled dependencies are reused.
[profile.dev.package."*"]
debug = false

[workspace]
TOML
} >Cargo.toml
cp "$REPO/Cargo.lock" .
cp "$unpacked/examples/quickstart.rs" src/main.rs
CARGO_TARGET_DIR="$REPO/target" cargo build --offline --quiet
ACCORD_URL="sqlite://$WORK/accord.db" "$REPO/target/debug/accord-dist-rust-check" >"$WORK/out" 2>&1 ||
  { cat "$WORK/out" >&2; echo "the Rust quick start failed" >&2; exit 1; }
expect_quickstart_output "$WORK/out"
# README's dependency line leaves the feature `etcd` off (no protoc needed): an etcd:// URL is
# refused at connect, naming the feature to turn on. This is the one build of the core without
# the feature in `make test` (the bindings, the CLI and the core's own tests all enable it).
if ACCORD_URL="etcd://127.0.0.1:1" "$REPO/target/debug/accord-dist-rust-check" >"$WORK/out" 2>&1 ||
  ! grep -q 'feature `etcd`' "$WORK/out"; then
  cat "$WORK/out" >&2
  echo "an etcd:// URL without the feature \`etcd\` was not refused naming it" >&2
  exit 1
fi
echo "ok: accord-coord $VERSION from its .crate, quick start against sqlite; etcd:// refused without the feature"
