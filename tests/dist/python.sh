#!/usr/bin/env bash
# `make test-dist-python` (mk/dist-pynode.mk): the wheel in dist/ as a user installs it. A fresh
# venv in a temp directory, a PATH with no cargo or rustc on it and pip with no index (the wheel
# must need neither a compiler nor a download), README.md's install line for the local wheel,
# then README.md's Python quick start, as written but for its URL: the embedded SQLite store in
# the temp directory. Twice, as the quick start says it runs again and again.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
README="$REPO/README.md"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n 1)
fail() { echo "test-dist-python: $*" >&2; exit 1; }

# The interpreter the user has (a pyenv shim would need pyenv on PATH: resolve it first).
python=$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)')
source "$REPO/tests/dist/no-rust-path.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/accord-dist-python.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The lines of README.md's "## Python quick start" section, up to the next "## ".
section=$(awk '/^## Python quick start/ { on = 1; next } /^## / { on = 0 } on' "$README")
[ -n "$section" ] || fail "README.md has no '## Python quick start' section"
install=$(printf '%s\n' "$section" | grep -E '^pip install /path/to/accord/dist/' | sed 's/[[:space:]]*#.*$//') ||
  fail "README.md's Python quick start has no 'pip install /path/to/accord/dist/…' line"
[ "$(printf '%s\n' "$install" | wc -l)" = 1 ] || fail "more than one local install line: $install"
# DIST_DIR: the packages' folder (make test's debug packages are in target/dist-debug).
dist=${DIST_DIR:-$REPO/dist}
install=${install//\/path\/to\/accord\/dist/$dist}
wheel=${install#pip install }
[ -f "$wheel" ] || fail "README.md installs $wheel, which make dist-python did not build (ls $dist: $(ls "$dist" 2>&1))"

"$python" -m venv "$work/venv"
export PATH="$work/venv/bin:$NO_RUST_PATH" VIRTUAL_ENV="$work/venv" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PYTHONPATH
! command -v cargo >/dev/null && ! command -v rustc >/dev/null || fail "cargo or rustc is still on PATH"
[ "$(command -v pip)" = "$work/venv/bin/pip" ] || fail "pip is $(command -v pip), not the venv's"
echo "+ $install   (in $work/venv, PATH without cargo/rustc, no package index)"
cd "$work"
sh -c "$install --quiet"

# Installed, from the venv, with its metadata, stubs and the license text.
python - "$VERSION" <<'EOF'
import importlib.metadata as md
import sys
from pathlib import Path

import accord

version = sys.argv[1]
where = Path(accord.__file__).resolve()
assert Path(sys.prefix).resolve() in where.parents, f"accord imported from {where}"
assert md.version("accord-coord") == version == accord.__version__, (md.version("accord-coord"), version, accord.__version__)
files = [str(f) for f in md.files("accord-coord") or []]
for wanted in ("accord/py.typed", "accord/_accord.pyi"):
    assert wanted in files, f"{wanted} is not in the wheel: {files}"
assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files), f"no license file: {files}"
meta = md.metadata("accord-coord")
assert meta["License-Expression"] == "Apache-2.0", meta["License-Expression"]
print(f"accord-coord {version}: import accord from {where.parent}")
EOF

block=$(printf '%s\n' "$section" | awk '/^```python$/ { on = 1; next } on && /^```$/ { exit } on')
url='postgres://app:secret@localhost/app'
[ "$(printf '%s\n' "$block" | grep -c -F "$url")" = 1 ] || fail "the Python quick start does not connect to $url once"
printf '%s\n' "${block//$url/sqlite:///$work/accord.db}" >"$work/quickstart.py"
for round in 1 2; do
  out=$(python quickstart.py) || fail "the quick start failed (round $round): $out"
  printf '%s\n' "$out" | sed "s/^/  [$round] /"
  printf '%s\n' "$out" | grep -qE '^holding daily/2026-11-22 with fence [0-9]+$' || fail "no 'holding … with fence' line"
  printf '%s\n' "$out" | grep -qxF "Message(channel='jobs', payload='report ready')" || fail "no notification"
done

# The sdist, where pip falls back to it (a platform with no wheel), on this machine with no Rust:
# its build backend must stop at once saying what is served and what to do, not fetch a Rust
# toolchain (maturin's backend alone would). pip from the repository's .venv, which has the
# backend's maturin, without build isolation (no package index here).
sdist="$dist/accord_coord-$VERSION.tar.gz"
[ -f "$sdist" ] || fail "make dist-python did not build $sdist"
if out=$(PATH="$REPO/.venv/bin:$NO_RUST_PATH" "$REPO/.venv/bin/python" -m pip wheel --no-build-isolation \
  --no-deps --no-index --no-cache-dir -w "$work/from-sdist" "$sdist" 2>&1); then
  fail "pip built the sdist with no Rust on PATH: $out"
fi
printf '%s\n' "$out" | grep -qF 'accord-coord: no wheel of this version matches this platform (wheels: Linux x86_64' ||
  fail "pip on the sdist without Rust does not say what is served and what to do: $out"
printf '%s\n' "$out" | grep -qiE 'puccinialin|installing into a temporary directory' &&
  fail "the sdist's build went for a Rust toolchain: $out"
echo "  the sdist without Rust: $(printf '%s\n' "$out" | grep -oF 'accord-coord: no wheel of this version matches this platform')"
echo "test-dist-python: ok ($(basename "$wheel"))"
