#!/usr/bin/env bash
# `make test-dist-node` (mk/dist-pynode.mk): the npm tarballs in dist/ as a user installs them.
# An empty project in a temp directory, a PATH with no cargo or rustc on it, npm offline with an
# empty cache (the tarballs must need neither a compiler nor a download), README.md's install
# line for the local tarballs; the addon that loads must be the platform package's. Then
# README.md's Node quick start, as written but for its URL (the embedded SQLite store in the
# temp directory): its first program on this node as ESM and as CommonJS (README's require line
# in place of the import), its `await using` form compiled by TypeScript, each twice.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
README="$REPO/README.md"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n 1)
TSC="$REPO/node/node_modules/typescript/bin/tsc"
NODE_TYPES="$REPO/node/node_modules/@types"
fail() { echo "test-dist-node: $*" >&2; exit 1; }
[ -f "$TSC" ] || fail "$TSC is missing: make node-deps"
source "$REPO/tests/dist/no-rust-path.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/accord-dist-node.XXXXXX")
trap 'rm -rf "$work"' EXIT
app="$work/app"
mkdir "$app"

section=$(awk '/^## Node quick start/ { on = 1; next } /^## / { on = 0 } on' "$README")
[ -n "$section" ] || fail "README.md has no '## Node quick start' section"
install=$(printf '%s\n' "$section" | grep -E '^npm install /path/to/accord/dist/' | sed 's/[[:space:]]*#.*$//') ||
  fail "README.md's Node quick start has no 'npm install /path/to/accord/dist/…' line"
[ "$(printf '%s\n' "$install" | wc -l)" = 1 ] || fail "more than one local install line: $install"
# DIST_DIR: the packages' folder (make test's debug packages are in target/dist-debug).
dist=${DIST_DIR:-$REPO/dist}
install=${install//\/path\/to\/accord\/dist/$dist}
for tarball in ${install#npm install }; do
  [ -f "$tarball" ] || fail "README.md installs $tarball, which make dist-node did not build (ls $dist: $(ls "$dist" 2>&1))"
done
require=$(printf '%s\n' "$section" | grep -oE "const \{ connect \} = require\('accord-coord'\)" | head -n 1) ||
  fail "README.md's Node quick start does not show the CommonJS require line"

export PATH="$NO_RUST_PATH" npm_config_cache="$work/npm-cache"
unset NAPI_RS_NATIVE_LIBRARY_PATH NODE_PATH
! command -v cargo >/dev/null && ! command -v rustc >/dev/null || fail "cargo or rustc is still on PATH"
cd "$app"
echo "+ $install   (in $app, PATH without cargo/rustc, npm --offline with an empty cache)"
sh -c "$install --offline --no-audit --no-fund --loglevel=error"

# The main package has no addon; the platform package's is the one that loads; one version.
node - "$VERSION" <<'EOF'
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const version = process.argv[2]
const modules = path.resolve('node_modules')
const main = require('accord-coord/package.json')
assert.equal(main.version, version)
const platforms = Object.keys(main.optionalDependencies ?? {})
assert.deepEqual(platforms, ['accord-coord-linux-x64-gnu'], 'the optionalDependencies are the built platform packages')
for (const name of platforms) assert.equal(main.optionalDependencies[name], version, name)
assert.equal(require('accord-coord-linux-x64-gnu/package.json').version, version)
const shipped = fs.readdirSync(path.join(modules, 'accord-coord'))
assert.ok(!shipped.some((f) => f.endsWith('.node')), `the main package ships an addon: ${shipped}`)
const accord = require('accord-coord')
assert.equal(typeof accord.connect, 'function')
const loaded = Object.keys(require.cache).filter((f) => f.endsWith('.node'))
const expected = path.join(modules, 'accord-coord-linux-x64-gnu', 'accord.linux-x64-gnu.node')
assert.deepEqual(loaded, [expected], 'the addon loaded is the platform package\'s')
console.log(`accord-coord ${version}: addon ${path.relative(process.cwd(), loaded[0])}`)
EOF

# The quick start's two programs: the first (```js) as written on this machine's node, which
# may be the stated minimum, Node 20 (no `await using`), as ESM and as CommonJS (README's require
# line in place of the import, the rest in an async function); the second (```ts, `await using`)
# compiled by TypeScript against the installed types.
fenced() { printf '%s\n' "$section" | awk -v lang="$1" '$0 == "```" lang { on = 1; next } on && /^```$/ { exit } on'; }
url='postgres://app:secret@localhost/app'
import="import { connect } from 'accord-coord'"
for lang in js ts; do
  block=$(fenced "$lang")
  [ -n "$block" ] || fail "the Node quick start has no \`\`\`$lang block"
  [ "$(printf '%s\n' "$block" | grep -c -F "$url")" = 1 ] || fail "the Node quick start's $lang block does not connect to $url once"
  [ "$(printf '%s\n' "$block" | head -n 1)" = "$import" ] || fail "the Node quick start's $lang block does not begin with: $import"
done
js=$(fenced js)
js=${js//$url/sqlite:///$work/accord.db}
printf '%s\n' "$js" >quickstart.mjs
{
  printf '%s\n\nasync function main() {\n' "$require"
  printf '%s\n' "$js" | tail -n +2
  printf '}\n\nmain().catch((err) => {\n  console.error(err)\n  process.exitCode = 1\n})\n'
} >quickstart.cjs
ts=$(fenced ts)
printf '%s\n' "${ts//$url/sqlite:///$work/accord.db}" >quickstart-using.mts
cat >tsconfig.json <<EOF
{
  "compilerOptions": {
    "target": "ES2022",
    "module": "nodenext",
    "moduleResolution": "nodenext",
    "lib": ["ES2022", "esnext.disposable"],
    "types": ["node"],
    "typeRoots": ["$NODE_TYPES"],
    "strict": true,
    "outDir": "out"
  },
  "files": ["quickstart-using.mts"]
}
EOF
node "$TSC" -p tsconfig.json || fail "the await-using quick start does not compile against the installed types"

echo "  node $(node --version)"
for script in quickstart.mjs quickstart.cjs out/quickstart-using.mjs; do
  for round in 1 2; do
    out=$(node "$script") || fail "$script failed (round $round): $out"
    printf '%s\n' "$out" | sed "s|^|  [$(basename "$script") $round] |"
    printf '%s\n' "$out" | grep -qE '^holding daily/2026-11-22 with fence [0-9]+$' || fail "no 'holding … with fence' line"
    printf '%s\n' "$out" | grep -qxF 'jobs: report ready' || fail "no notification"
  done
done
echo "test-dist-node: ok ($(cd "$REPO" && echo ${install#npm install } | sed "s|$REPO/||g"))"
