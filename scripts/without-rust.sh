#!/usr/bin/env bash
# Runs a command the way a user without a Rust toolchain would: every PATH entry that holds
# cargo, rustc or rustup is dropped, and the toolchain's environment variables are unset. Fails
# (exit 2) if cargo or rustc can still be found, so a test that passes here proves that an
# installed package needs no Rust. Used by the installed-package tests (mk/dist.mk).
#
#   scripts/without-rust.sh CMD [ARG...]
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARG...]" >&2; exit 2; }
kept=()
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] || continue
  if [ -e "$d/cargo" ] || [ -e "$d/rustc" ] || [ -e "$d/rustup" ]; then continue; fi
  kept+=("$d")
done
PATH=$(IFS=:; echo "${kept[*]}")
export PATH
unset CARGO CARGO_HOME CARGO_TARGET_DIR RUSTUP_HOME RUSTUP_TOOLCHAIN RUSTC RUSTFLAGS RUSTDOCFLAGS
for tool in cargo rustc rustup; do
  if found=$(command -v "$tool"); then
    echo "without-rust.sh: $tool is still reachable at $found" >&2
    exit 2
  fi
done
exec "$@"
