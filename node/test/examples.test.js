'use strict'
// The examples compile under `tsc --strict` and do what they say against a real coordinator.

const assert = require('node:assert/strict')
const { execFileSync, spawn } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { before, test } = require('node:test')
const { accord, databaseUrl, PACKAGE_DIR, SEC } = require('./support')

// Inside the package, so that `import ... from 'accord-coord'` resolves to it (self-reference).
const out = path.join(PACKAGE_DIR, 'build', 'examples')
const tsc = path.join(PACKAGE_DIR, 'node_modules', 'typescript', 'bin', 'tsc')

before(() => {
  execFileSync(process.execPath, [tsc, '-p', 'tsconfig.json', '--noEmit', 'false', '--outDir', out], {
    cwd: PACKAGE_DIR,
    stdio: 'inherit',
  })
})

function run(example, args = [], env = {}) {
  return execFileSync(process.execPath, [path.join(out, example), ...args], {
    encoding: 'utf8',
    timeout: 60 * SEC,
    env: { ...process.env, ACCORD_URL: databaseUrl(), ...env },
  })
}

// Twice in a row: a quick start runs again and again (it resets the key it marks done), and
// after the other languages' quick starts, which use the same namespace and key.
test('quickstart, twice in a row', () => {
  for (let round = 0; round < 2; round++) {
    const output = run('quickstart.mjs')
    assert.match(output, /holding daily\/2026-11-22 with fence \d+/)
    assert.match(output, /jobs: report ready/)
    assert.match(output, /daily\/2026-11-22 done \d+n \{ rows: 42 \}/)
  }
})

// The first block of each README's Node quick start, as written but for its URL, on the node
// running this test (the stated minimum, Node 20, has no `await using`: that form comes second).
function quickstartBlock(readme, heading) {
  const text = fs.readFileSync(readme, 'utf8')
  const section = text.split(heading)[1]?.split(/\n## /)[0]
  assert.ok(section, `${readme} has no '${heading}' section`)
  const block = section.match(/\n```(\w+)\n([\s\S]*?)\n```\n/g)?.find((b) => !b.startsWith('\n```sh'))
  assert.ok(block?.startsWith('\n```js\n'), `the first code block of ${readme}'s '${heading}' is not \`\`\`js: ${block}`)
  return block.replace(/^\n```js\n/, '').replace(/\n```\n$/, '\n')
}

for (const [readme, heading] of [
  [path.join(PACKAGE_DIR, '..', 'README.md'), '## Node quick start'],
  [path.join(PACKAGE_DIR, 'README.md'), '## Quick start'],
]) {
  test(`${path.relative(path.join(PACKAGE_DIR, '..'), readme)}: the first quick start block runs on node ${process.versions.node}`, () => {
    const url = 'postgres://app:secret@localhost/app'
    const block = quickstartBlock(readme, heading)
    assert.equal(block.split(url).length, 2, `the block connects to ${url} once`)
    const dir = path.join(PACKAGE_DIR, 'build', 'readme') // inside the package: 'accord-coord' resolves
    fs.mkdirSync(dir, { recursive: true })
    const file = path.join(dir, `${path.basename(path.dirname(readme))}-quickstart.mjs`)
    fs.writeFileSync(file, block.replace(url, databaseUrl()))
    for (let round = 0; round < 2; round++) {
      const output = execFileSync(process.execPath, [file], { encoding: 'utf8', timeout: 60 * SEC })
      assert.match(output, /^holding daily\/2026-11-22 with fence \d+$/m)
      assert.match(output, /^jobs: report ready$/m)
    }
  })
}

test('worker pool', () => {
  const namespace = `pool_${process.pid}`
  const output = run('worker-pool.mjs', ['3', '12'], { ACCORD_NAMESPACE: namespace })
  // A work pool: offered once, claimed by the workers, every key done.
  assert.match(output, /offered 12 new files/)
  assert.match(output, /processed 12 of 12 files/)
  assert.match(output, /pool bucket\/: 0 free, 0 held, 12 done/)
  assert.match(output, /report \(fence \d+\): 12 files done/)
})

test('listener', async () => {
  const channel = `listener_${process.pid}`
  const child = spawn(process.execPath, [path.join(out, 'listener.mjs'), channel], {
    env: { ...process.env, ACCORD_URL: databaseUrl() },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  let output = ''
  const listening = new Promise((resolve) =>
    child.stdout.on('data', (d) => {
      output += d
      if (output.includes('listening on')) resolve()
    }),
  )
  const exited = new Promise((resolve) => child.on('exit', resolve))
  await listening
  const sender = await accord.connect(databaseUrl())
  await sender.notify(channel, 'hello')
  await sender.notify(channel, 'quit')
  await sender.close()
  assert.equal(await exited, 0)
  assert.match(output, new RegExp(`${channel}: hello`))
})
