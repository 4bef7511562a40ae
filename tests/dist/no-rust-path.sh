# Sourced by tests/dist/*.sh: NO_RUST_PATH is $PATH without the directories that hold cargo or
# rustc (here ~/.cargo/bin), what a machine with no Rust toolchain has. (A distribution's Rust in
# /usr/bin would take node and python3 away with it; the test then fails saying so.)
NO_RUST_PATH=
IFS=: read -r -a _dirs <<<"$PATH"
for _d in "${_dirs[@]}"; do
  [ -n "$_d" ] || continue
  if [ -e "$_d/cargo" ] || [ -e "$_d/rustc" ]; then continue; fi
  NO_RUST_PATH=${NO_RUST_PATH:+$NO_RUST_PATH:}$_d
done
unset _d _dirs
