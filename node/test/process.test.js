'use strict'
// G12 in Node: a process exits by itself once nothing is held or listened to, and only then.
// Each case runs a child script and watches when it exits.

const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')
const { accord, databaseUrl, eventually, PACKAGE_DIR, SEC, within } = require('./support')

const namespace = `process_${process.pid}`

/**
 * Starts `body` (an async function body with `accord`, `url`, `ns` and `say` in scope), with
 * `flags` for node.
 */
function child(body, flags = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'accord-node-process-'))
  const script = path.join(dir, 'child.js')
  fs.writeFileSync(
    script,
    `'use strict'
const accord = require(${JSON.stringify(PACKAGE_DIR)})
const url = process.env.ACCORD_TEST_DATABASE_URL
const ns = ${JSON.stringify(namespace)}
const say = (line) => process.stdout.write(line + '\\n')
;(async () => {
${body}
})().catch((e) => { console.error(e); process.exit(3) })
`,
  )
  const proc = spawn(process.execPath, [...flags, script], { stdio: ['ignore', 'pipe', 'pipe'] })
  const lines = []
  const waiters = []
  let stderr = ''
  proc.stderr.on('data', (d) => (stderr += d))
  let buffered = ''
  proc.stdout.on('data', (d) => {
    buffered += d
    let i
    while ((i = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, i)
      buffered = buffered.slice(i + 1)
      lines.push({ line, at: performance.now() })
      for (const w of waiters.splice(0)) w()
    }
  })
  const exited = new Promise((resolve) =>
    proc.on('exit', (code, signal) => resolve({ code, signal, at: performance.now() })),
  )
  return {
    proc,
    exited,
    stderr: () => stderr,
    /** Resolves with the time `line` was printed. */
    async printed(line, ms = 20 * SEC) {
      const until = performance.now() + ms
      for (;;) {
        const hit = lines.find((l) => l.line === line)
        if (hit) return hit.at
        const done = await Promise.race([
          new Promise((r) => waiters.push(r)).then(() => false),
          exited.then(() => true),
          new Promise((r) => setTimeout(() => r(true), Math.max(0, until - performance.now()))),
        ])
        if (done && !lines.find((l) => l.line === line)) {
          throw new Error(`child did not print ${line} (stderr: ${stderr})`)
        }
      }
    },
    /** Whether the child is still running after `ms`. */
    async aliveAfter(ms) {
      const result = await Promise.race([
        exited.then(() => false),
        new Promise((r) => setTimeout(() => r(true), ms)),
      ])
      return result
    },
  }
}

/**
 * Asserts the child exits with status 0 within `ms` of printing `line`. What would keep it
 * alive wrongly (a lease's keepalive, a listening connection, a waiter) keeps it alive for good
 * or for at least 30 s, so the bound is generous: a slow run must not fail it.
 */
async function exitsSoonAfter(c, line, ms = 15 * SEC) {
  const printedAt = await c.printed(line)
  const exit = await Promise.race([
    c.exited,
    new Promise((r) => setTimeout(() => r(null), ms + 10 * SEC)),
  ])
  if (exit === null) c.proc.kill('SIGKILL')
  assert.ok(exit, `the child is still running ${ms + 10 * SEC} ms after ${line}`)
  assert.equal(exit.code, 0, c.stderr())
  const lag = exit.at - printedAt
  assert.ok(lag < ms, `the child exited ${Math.round(lag)} ms after ${line}`)
}

test.before(() => databaseUrl())

test('exits after releasing, closing its subscriptions and its client', async () => {
  const c = child(`
  const client = await accord.connect(url, { namespace: ns })
  const lease = await client.acquire('exit/a', { ttl: 5000 })
  void lease.lost // a pending lost Promise must not hold the process
  await lease.release()
  const done = await client.tryAcquire('exit/b', { ttl: 5000 })
  await done.done()
  await client.reset('exit/b')
  const controller = new AbortController()
  await (await client.acquire('exit/c', { signal: controller.signal })).release()
  const sub = await client.listen('exit_ch')
  await client.notify('exit_ch', 'x')
  for await (const m of sub) break
  const sub2 = await client.listen('exit_ch2')
  await sub2.close()
  await client.close()
  say('DONE')`)
  await exitsSoonAfter(c, 'DONE')
})

test('exits once nothing is held or listened to, even with the client left open', async () => {
  const c = child(`
  const client = await accord.connect(url, { namespace: ns })
  const lease = await client.acquire('open/a', { ttl: 5000 })
  await lease.release()
  const sub = await client.listen('open_ch')
  await sub.close()
  say('DONE')`)
  await exitsSoonAfter(c, 'DONE')
})

test('a held lease alone does not keep the process alive', async () => {
  const c = child(`
  const client = await accord.connect(url, { namespace: ns })
  const lease = await client.acquire('forgotten/' + process.pid, { ttl: 2000 })
  say('HELD')`)
  await exitsSoonAfter(c, 'HELD')
})

test('a leadership and an observer with no call pending do not keep the process alive', async () => {
  const c = child(`
  const client = await accord.connect(url, { namespace: ns })
  const election = client.election('exit/' + process.pid)
  const observer = await election.observe()
  const leadership = await election.campaign('v', { ttl: 2000 })
  await observer.next()
  say('LEADING')`)
  await exitsSoonAfter(c, 'LEADING')
})

test('waiting on lost keeps the process alive while held; losing it at close ends that', async () => {
  const c = child(`
  const client = await accord.connect(url, { namespace: ns })
  const lease = await client.acquire('held/' + process.pid, { ttl: 2000 })
  say('HELD')
  process.on('SIGUSR2', () => client.close())
  await lease.lost
  say('LOST')`)
  await c.printed('HELD')
  assert.equal(await c.aliveAfter(2500), true, 'a held lease keeps the process alive')
  c.proc.kill('SIGUSR2')
  await exitsSoonAfter(c, 'LOST')
})

test('a collected lease ends the wait on its lost Promise: the process exits', async () => {
  // Collecting the handle releases the lease (the core does, when its last handle goes), which
  // ends the lease, and with it the wait behind lost.
  const c = child(
    `
  const client = await accord.connect(url, { namespace: ns })
  let lease = await client.acquire('collected/' + process.pid, { ttl: 60000 })
  void lease.lost
  lease = null
  for (let i = 0; i < 3; i++) {
    global.gc()
    await new Promise((r) => setImmediate(r))
  }
  say('DROPPED')`,
    ['--expose-gc'],
  )
  await exitsSoonAfter(c, 'DROPPED')
})

test('an open subscription keeps the process alive until it is closed', async () => {
  const channel = `alive_${process.pid}`
  const c = child(`
  const client = await accord.connect(url, { namespace: ns })
  const sub = await client.listen(${JSON.stringify(channel)})
  say('LISTENING')
  await new Promise((r) => setTimeout(r, 2000))
  say('STILL')
  for await (const m of sub) if (m.type === 'message' && m.payload === 'stop') break
  say('STOPPED')`)
  await c.printed('LISTENING')
  assert.equal(await c.aliveAfter(3000), true, 'an open subscription keeps the process alive')
  await c.printed('STILL')
  const sender = await accord.connect(databaseUrl(), { namespace })
  await sender.notify(channel, 'stop')
  await sender.close()
  await exitsSoonAfter(c, 'STOPPED')
})

test('a pending acquire keeps the process alive until it settles', async () => {
  const key = `pending/${process.pid}`
  const holder = await accord.connect(databaseUrl(), { namespace })
  const lease = await holder.acquire(key, { ttl: 60 * SEC })
  const c = child(`
  const client = await accord.connect(url, { namespace: ns })
  say('WAITING')
  const lease = await client.acquire(${JSON.stringify(key)})
  await lease.release()
  say('ACQUIRED')`)
  await c.printed('WAITING')
  assert.equal(await c.aliveAfter(1500), true)
  await lease.release()
  await exitsSoonAfter(c, 'ACQUIRED')
  await holder.close()
})

test('worker threads terminated with calls in flight leave the process sound', async () => {
  // Each JavaScript thread settles Promises through its own completion function, torn down
  // with the thread: calls finishing after that must not reach it.
  const c = child(`
  const { Worker } = require('node:worker_threads')
  const code = \`
    const { parentPort } = require('node:worker_threads')
    const accord = require(\${JSON.stringify(require.resolve(${JSON.stringify(PACKAGE_DIR)}))})
    ;(async () => {
      const client = await accord.connect(\${JSON.stringify(url)}, { namespace: \${JSON.stringify(ns)} })
      parentPort.postMessage('ready')
      for (let i = 0; ; i++) {
        const lease = await client.tryAcquire('worker/' + (i % 50))
        if (lease) await lease.release()
      }
    })()\`
  for (let i = 0; i < 5; i++) {
    const w = new Worker(code, { eval: true })
    await new Promise((r) => w.once('message', r))
    await w.terminate()
  }
  const client = await accord.connect(url, { namespace: ns })
  await (await client.acquire('worker/main', { ttl: 5000 })).release()
  await client.close()
  say('DONE')`)
  await exitsSoonAfter(c, 'DONE')
})

// SIGTERM (what Docker and Kubernetes send) closes the clients, then ends the process. Every
// lease has a ttl of 120 s and every wait is bounded well below it (60 s): only a release can
// pass these tests, never an expiry.
const TERM_TTL = 120 * SEC
const HANG = 60 * SEC

/** Whether `owner` holds `key` now, as a fresh client of the namespace reads it. */
async function heldBy(owner, key) {
  const inspector = await accord.connect(databaseUrl(), { namespace })
  const page = await inspector.list({ prefix: key })
  await inspector.close()
  return page.items.some((i) => i.key === key && i.state === 'held' && i.owner === owner)
}

test('SIGTERM gives back a lease and every shard of a fleet, then ends the process by SIGTERM', async () => {
  // The child holds a lease and every shard (alone at first), then reads no more events: it
  // never agrees to a hand-off (its handoffTimeout is its ttl); only the SIGTERM listener can
  // give anything back before the ttl.
  const c = child(`
  const client = await accord.connect(url, { namespace: ns, owner: 'term-child' })
  await client.acquire('term/held', { ttl: ${TERM_TTL} })
  const fleet = await client.fleet('term-f', { shards: 4, ttl: ${TERM_TTL}, period: 200 })
  while (fleet.shards().length < 4) await fleet.next()
  setInterval(() => {}, 1 << 30)
  say('READY')`)
  await c.printed('READY')
  const other = await accord.connect(databaseUrl(), { namespace, owner: 'term-other', ttl: TERM_TTL })
  try {
    const fleet = await other.fleet('term-f', { shards: 4, ttl: TERM_TTL, period: 200 })
    assert.equal(await heldBy('term-child', 'term/held'), true)
    c.proc.kill('SIGTERM')
    const exit = await within(HANG, c.exited, 'the child ending after SIGTERM')
    assert.deepEqual([exit.code, exit.signal], [null, 'SIGTERM'], c.stderr())
    assert.equal(await heldBy('term-child', 'term/held'), false, 'the lease was not released')
    const back = await eventually(HANG, () => fleet.shards().length === 4)
    assert.ok(back, `only ${fleet.shards()} came back`)
  } finally {
    await other.close()
  }
})

test("an application's own SIGTERM listener decides the exit; closeOnSigterm: false is left out", async () => {
  const c = child(`
  // The documented pattern: close, then exit. accord's own listener closes the clients too,
  // and leaves the exit to this one; closeAll returns only once every close under way is done.
  process.on('SIGTERM', async () => {
    await accord.closeAll()
    say('MINE ' + client.closed + ' ' + kept.closed)
    process.exit(7)
  })
  const client = await accord.connect(url, { namespace: ns, owner: 'term-app' })
  const kept = await accord.connect(url, { namespace: ns, closeOnSigterm: false })
  await client.acquire('term/app', { ttl: ${TERM_TTL} })
  setInterval(() => {}, 1 << 30)
  say('READY')`)
  await c.printed('READY')
  c.proc.kill('SIGTERM')
  const exit = await within(HANG, c.exited, 'the child ending after SIGTERM')
  assert.equal(exit.code, 7, c.stderr())
  await c.printed('MINE true false')
  assert.equal(await heldBy('term-app', 'term/app'), false, 'the lease was not released')
})

test('closeOnSigterm: false adds no listener; closeAll closes the others', async () => {
  const c = child(`
  const kept = await accord.connect(url, { namespace: ns, closeOnSigterm: false })
  say('LISTENERS ' + process.listenerCount('SIGTERM'))
  const closed = await accord.connect(url, { namespace: ns })
  const again = await accord.connect(url, { namespace: ns })
  say('LISTENERS ' + process.listenerCount('SIGTERM'))
  say('CLOSED ' + (await accord.closeAll()) + ' ' + closed.closed + ' ' + again.closed + ' ' + kept.closed)
  await kept.close()`)
  await c.printed('LISTENERS 0')
  await c.printed('LISTENERS 1')
  await c.printed('CLOSED 2 true true false')
  const exit = await within(HANG, c.exited, 'the child ending')
  assert.equal(exit.code, 0, c.stderr())
})
