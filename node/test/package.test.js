'use strict'
// The generated loader and index.d.ts are fresh, and `npm pack` in node/ takes what it should.

const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
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

test('the committed index.js and index.d.ts are what napi generates', { timeout: 600 * SEC }, () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'accord-node-gen-'))
  run(path.join(PACKAGE_DIR, 'node_modules', '.bin', 'napi'), ['build', '--platform', '-o', out], {
    cwd: PACKAGE_DIR,
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: 600 * SEC,
  })
  for (const file of ['index.js', 'index.d.ts']) {
    const committed = fs.readFileSync(path.join(PACKAGE_DIR, file), 'utf8')
    const fresh = fs.readFileSync(path.join(out, file), 'utf8')
    assert.ok(
      committed === fresh,
      `node/${file} is stale: run \`npm run build\` in node/ and commit it`,
    )
  }
  fs.rmSync(out, { recursive: true, force: true })
})

// The package people install is made by `make dist-node` (the addon goes in a package per
// platform) and tested installed by `make test-dist-node`; here, what `npm pack` takes from node/.
test('npm pack takes the loader, the ESM entry, the types and no addon', { timeout: 120 * SEC }, () => {
  const [packed] = JSON.parse(run(npm, ['pack', '--dry-run', '--json', ...quiet], { cwd: PACKAGE_DIR }))
  const files = packed.files.map((f) => f.path).sort()
  assert.deepEqual(files, ['README.md', 'index.d.ts', 'index.js', 'index.mjs', 'package.json'])
  assert.equal(packed.name, 'accord-coord')
})
