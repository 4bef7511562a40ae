'use strict'
// The generated loader and index.d.ts are fresh, and `npm pack` in node/ takes what it should.

const assert = require('node:assert/strict')
const { execFileSync, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')
const { PACKAGE_DIR, SEC } = require('./support')

const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm'
const quiet = ['--no-audit', '--no-fund', '--loglevel=error']

function run(command, args, options = {}) {
  return execFileSync(command, args, { encoding: 'utf8', timeout: 120 * SEC, ...options })
}

// napi writes the loader and index.d.ts beside the addon it builds. `make test-node` has just
// built the addon under test into build/napi (build-node-debug) and copied it into node/, so
// what napi generated for the source under test is there; building again would cost a minute.
// Only when that folder holds the very addon these tests load: otherwise (node --test run by
// hand after another build) it builds into a temporary folder.
function builtWithTheAddonUnderTest(built) {
  const addons = fs.readdirSync(PACKAGE_DIR).filter((f) => /^accord\..*\.node$/.test(f))
  return (
    addons.length === 1 &&
    ['index.js', 'index.d.ts', addons[0]].every((f) => fs.existsSync(path.join(built, f))) &&
    fs.readFileSync(path.join(built, addons[0])).equals(fs.readFileSync(path.join(PACKAGE_DIR, addons[0])))
  )
}

test('the committed index.js and index.d.ts are what napi generates', { timeout: 600 * SEC }, () => {
  const built = path.join(PACKAGE_DIR, 'build', 'napi')
  const reuse = builtWithTheAddonUnderTest(built)
  const out = reuse ? built : fs.mkdtempSync(path.join(os.tmpdir(), 'accord-node-gen-'))
  if (!reuse) {
    run(path.join(PACKAGE_DIR, 'node_modules', '.bin', 'napi'), ['build', '--platform', '-o', out], {
      cwd: PACKAGE_DIR,
      // The addon's own cargo folder (mk/node.mk, NODE_CARGO), not the wheel's.
      env: { ...process.env, CARGO_TARGET_DIR: path.join(PACKAGE_DIR, '..', 'target', 'node-cargo') },
      stdio: ['ignore', 'ignore', 'pipe'],
      timeout: 600 * SEC,
    })
  }
  for (const file of ['index.js', 'index.d.ts']) {
    const committed = fs.readFileSync(path.join(PACKAGE_DIR, file), 'utf8')
    const fresh = fs.readFileSync(path.join(out, file), 'utf8')
    assert.ok(
      committed === fresh,
      `node/${file} is stale: run \`npm run build\` in node/ and commit it`,
    )
  }
  if (!reuse) fs.rmSync(out, { recursive: true, force: true })
})

// The package people install is made by `make dist-node` (the addon goes in a package per
// platform) and tested installed by `make test-dist-node`; here, what `npm pack` takes from node/.
test('npm pack takes the loaders, the ESM entry, the types and no addon', { timeout: 120 * SEC }, () => {
  const [packed] = JSON.parse(run(npm, ['pack', '--dry-run', '--json', ...quiet], { cwd: PACKAGE_DIR }))
  const files = packed.files.map((f) => f.path).sort()
  assert.deepEqual(files, ['README.md', 'index.d.ts', 'index.js', 'index.mjs', 'loader.js', 'package.json'])
  assert.equal(packed.name, 'accord-coord')
})

// A copy of the package with no addon beside it and no platform package to find: what a user on
// a platform without a prebuilt addon gets. The error must name the platforms served and what to
// do, not napi's "npm has a bug" advice.
function loadWithoutAddon(targets) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'accord-node-noaddon-'))
  for (const file of ['loader.js', 'index.js', 'index.mjs']) fs.copyFileSync(path.join(PACKAGE_DIR, file), path.join(dir, file))
  const pkg = JSON.parse(fs.readFileSync(path.join(PACKAGE_DIR, 'package.json'), 'utf8'))
  if (targets) pkg.napi.targets = targets
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(pkg))
  const env = { ...process.env }
  delete env.NAPI_RS_NATIVE_LIBRARY_PATH
  delete env.NODE_PATH
  // The message of the error that ends the process (the first line of its report on stderr).
  const results = [
    ['-e', `require(${JSON.stringify(dir)})`],
    ['--input-type=module', '-e', `import ${JSON.stringify(path.join(dir, 'index.mjs'))}`],
  ].map((args) => {
    const child = spawnSync(process.execPath, args, { cwd: dir, env, encoding: 'utf8', timeout: 60 * SEC })
    assert.notEqual(child.status, 0, `node ${args.join(' ')} loaded a package with no addon`)
    const thrown = child.stderr.match(/^Error: (.*)$/m)
    assert.ok(thrown, `no error on stderr: ${child.stderr}`)
    return thrown[1]
  })
  fs.rmSync(dir, { recursive: true, force: true })
  assert.equal(results[0], results[1], 'require and import fail alike')
  return results[0]
}

test('on a platform with no prebuilt addon, the error names the platforms served and how to build', () => {
  const message = loadWithoutAddon(['aarch64-apple-darwin', 'x86_64-pc-windows-msvc'])
  assert.doesNotMatch(message, /npm has a bug/)
  assert.match(message, /^accord-coord \S+ has no addon loadable on linux-x64-gnu \(prebuilt: darwin-arm64, win32-x64-msvc\): /)
  assert.match(message, /build it from source \(needs Rust and Node\): in a clone of accord, `make dist-node`/)
})

test('on a served platform whose addon package is missing, the error says which to install', () => {
  const message = loadWithoutAddon(null)
  assert.doesNotMatch(message, /npm has a bug/)
  assert.match(message, /has no addon loadable on linux-x64-gnu \(prebuilt: linux-x64-gnu, glibc ≥ 2\.17 for -gnu\)/)
  assert.match(message, /`npm install accord-coord-linux-x64-gnu@\d+\.\d+\.\d+`/)
})
