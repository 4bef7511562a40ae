'use strict'
// Installing as a user does: `npm pack` in node/ gives a tarball with the built addon, and
// `npm install <tarball>` in an empty directory gives a working `require('accord')` and
// `import { connect } from 'accord'`. Also: the generated loader and index.d.ts are fresh.

const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')
const { databaseUrl, PACKAGE_DIR, SEC } = require('./support')

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

test('npm pack, then npm install of the tarball in an empty directory works', { timeout: 300 * SEC }, () => {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'accord-node-pack-'))
  try {
    const [packed] = JSON.parse(
      run(npm, ['pack', '--json', '--pack-destination', work, ...quiet], { cwd: PACKAGE_DIR }),
    )
    const files = packed.files.map((f) => f.path).sort()
    const addon = files.find((f) => /^accord\.[\w-]+\.node$/.test(f))
    assert.ok(addon, `the tarball holds the built addon: ${files}`)
    for (const f of ['index.js', 'index.mjs', 'index.d.ts', 'package.json']) {
      assert.ok(files.includes(f), `the tarball holds ${f}: ${files}`)
    }
    assert.ok(!files.some((f) => f.startsWith('src/') || f.startsWith('test/')), `${files}`)
    const tarball = path.join(work, packed.filename)

    const app = path.join(work, 'app')
    fs.mkdirSync(app)
    run(npm, ['install', '--offline', ...quiet, tarball], { cwd: app })
    assert.ok(fs.existsSync(path.join(app, 'node_modules', 'accord', addon)))

    const env = { ...process.env, ACCORD_TEST_DATABASE_URL: databaseUrl() }
    const cjs = `
      const { connect } = require('accord')
      ;(async () => {
        const client = await connect(process.env.ACCORD_TEST_DATABASE_URL, { namespace: 'pack_cjs_${process.pid}' })
        const lease = await client.tryAcquire('k')
        console.log('CJS', typeof lease.fence)
        await lease.release()
        await client.close()
      })()`
    assert.equal(run(process.execPath, ['-e', cjs], { cwd: app, env }).trim(), 'CJS bigint')
    const esm = `
      import { connect, Lease } from 'accord'
      import accord from 'accord'
      const client = await connect(process.env.ACCORD_TEST_DATABASE_URL, { namespace: 'pack_esm_${process.pid}' })
      const lease = await client.tryAcquire('k')
      console.log('ESM', lease instanceof Lease, accord.connect === connect)
      await lease.release()
      await client.close()`
    assert.equal(
      run(process.execPath, ['--input-type=module', '-e', esm], { cwd: app, env }).trim(),
      'ESM true true',
    )
  } finally {
    fs.rmSync(work, { recursive: true, force: true })
  }
})
