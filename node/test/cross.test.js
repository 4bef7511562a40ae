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
    execFileSync('cargo', ['build', '-p', 'accord', '--example', 'contend'], {
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
  const rust = spawn(contend, [h.url, h.tag, 'hold', 'shared', '1500'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const exited = new Promise((resolve) => rust.on('exit', resolve))
  const lines = readline.createInterface({ input: rust.stdout })
  const seen = {}
  const line = (word) =>
    new Promise((resolve, reject) => {
      const check = (l) => {
        if (l.startsWith(word)) {
          seen[word] = { line: l, at: performance.now() }
          resolve(seen[word])
        }
      }
      lines.on('line', check)
      exited.then(() => reject(new Error(`contend exited before printing ${word}`)))
    })
  const released = line('RELEASED')
  const held = await line('HELD')
  const rustFence = BigInt(held.line.split(' ')[1])
  // The Rust worker holds it for 1.5 s (a timer of its own, which this test cannot stop): a
  // grant by tryAcquire means this process was slower than that, and is judged the same way.
  // The holder's default ttl outlasts the acquire's timeout, so a grant within it follows the
  // release.
  const lease =
    (await node.tryAcquire('shared')) ?? (await node.acquire('shared', { timeout: 20 * SEC }))
  await released
  assert.ok(lease.fence > rustFence, `${lease.fence} > ${rustFence}`)
  assert.equal(await exited, 0)
  const [info] = (await node.list({ prefix: 'shared' })).items
  assert.equal(info.owner, node.owner)
  await lease.release()
})
