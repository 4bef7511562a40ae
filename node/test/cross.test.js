'use strict'
// Node and Rust workers on one coordinator: the core's `contend` example (a Rust worker) sends
// a notification a Node listener receives, and holds a lease a Node acquire waits for.

const assert = require('node:assert/strict')
const { execFileSync, spawn } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const readline = require('node:readline')
const { before } = require('node:test')
const { nextMessage, REPO_DIR, scenario, SEC } = require('./support')

const targetDir = process.env.CARGO_TARGET_DIR || path.join(REPO_DIR, 'target')
const contend = path.join(targetDir, 'debug', 'examples', 'contend')

before(() => {
  // make test-node builds it first; this keeps `node --test` usable on its own.
  if (!fs.existsSync(contend)) {
    execFileSync('cargo', ['build', '-p', 'accord-coord', '--example', 'contend'], {
      cwd: REPO_DIR,
      stdio: 'inherit',
    })
  }
})

scenario('a Node listener receives a notification sent from Rust', async (h) => {
  const channel = h.channel('from_rust')
  const node = await h.client('node')
  const sub = await node.listen(channel)
  execFileSync(contend, [h.url, h.tag, 'notify', channel, 'hello from rust'], { timeout: 30 * SEC })
  assert.deepEqual(await nextMessage(sub), {
    type: 'message',
    channel,
    payload: 'hello from rust',
  })
  await sub.close()
})

scenario('a Node acquire waits for a lease held by Rust and gets it at its release', async (h) => {
  const node = await h.client('node')
  // The Rust worker holds the key until its standard input ends: this test decides when.
  const rust = spawn(contend, [h.url, h.tag, 'hold', 'shared', '-'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const exited = new Promise((resolve) => rust.on('exit', resolve))
  try {
    const lines = readline.createInterface({ input: rust.stdout })
    // Judged at the end of its output, not at its exit: 'exit' may come before the last lines
    // were read.
    const ended = new Promise((resolve) => lines.on('close', resolve))
    const line = (word) =>
      new Promise((resolve, reject) => {
        lines.on('line', (l) => {
          if (l.startsWith(word)) resolve(l)
        })
        ended.then(() => reject(new Error(`contend ended its output before printing ${word}`)))
      })
    const released = line('RELEASED')
    const held = await line('HELD')
    const rustFence = BigInt(held.split(' ')[1])
    assert.equal(await node.tryAcquire('shared'), null, 'granted while Rust holds it')
    // The wait starts before the release. The holder's default ttl (30 s) outlasts the
    // acquire's timeout, so a grant within it follows the release.
    const waiting = node.acquire('shared', { timeout: 20 * SEC })
    rust.stdin.end()
    const lease = await waiting
    await released
    assert.ok(lease.fence > rustFence, `${lease.fence} > ${rustFence}`)
    assert.equal(await exited, 0)
    const [info] = (await node.list({ prefix: 'shared' })).items
    assert.equal(info.owner, node.owner)
    await lease.release()
  } finally {
    if (rust.exitCode === null && rust.signalCode === null) {
      rust.kill()
      await exited
    }
  }
})
