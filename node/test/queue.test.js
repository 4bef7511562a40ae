'use strict'
// Shared locks and fair waiting (X1, X2 of docs/semantics.md) through the Node API, on
// PostgreSQL. Order is established without sleeps: a waiter's place in line is taken when its
// client's queuedCount() says so, and wake-ups are counted per client (waiterWakeups()).

const assert = require('node:assert/strict')
const { eventually, handled, rejectsWith, scenario, SEC, within } = require('./support')

const TTL = 60 * SEC
const BOUND = 20 * SEC

/** Waits until `client` has `n` acquires with a place in a key's line. */
async function queued(client, n = 1) {
  assert.ok(
    await eventually(BOUND, () => client.queuedCount() === n),
    `${client.owner}: ${client.queuedCount()} queued, not ${n}`,
  )
}

/** A waiting acquire that logs `name` when granted; resolves with the lease. */
function waitFor(client, key, options, name, log) {
  return handled(
    client.acquire(key, { ttl: TTL, timeout: BOUND, ...options }).then((lease) => {
      log.push(name)
      return lease
    }),
  )
}

scenario('X1 three shared holders at once; an exclusive acquire waits for them all', async (h) => {
  const readers = [await h.client('r1'), await h.client('r2'), await h.client('r3')]
  const writer = await h.client('w')
  const late = await h.client('r4')
  const log = []

  const held = []
  for (const r of readers) {
    const lease = await r.acquire('k', { ttl: TTL, shared: true })
    assert.equal(lease.shared, true)
    held.push(lease)
  }
  for (let i = 1; i < held.length; i++) assert.ok(held[i].fence > held[i - 1].fence)
  const { items } = await writer.list({ prefix: 'k' })
  assert.deepEqual(
    items.map((i) => [i.owner, i.state, i.shared]).sort(),
    [
      ['r1', 'held', true],
      ['r2', 'held', true],
      ['r3', 'held', true],
    ],
  )

  // A shared holder renews but cannot change the key's metadata or finish it.
  await held[0].renew()
  await rejectsWith(held[0].renew({ x: 1 }), 'ACCORD_INVALID_ARGUMENT', /metadata/)
  await rejectsWith(held[0].done(), 'ACCORD_INVALID_ARGUMENT', /shared/)
  assert.equal(held[0].status, 'held')
  assert.equal(await writer.tryAcquire('k', { ttl: TTL }), null)

  const w = waitFor(writer, 'k', {}, 'writer', log)
  await queued(writer)
  // Once the writer waits, a new shared holder does not get in ahead of it.
  assert.equal(await late.tryAcquire('k', { ttl: TTL, shared: true }), null)

  await held[0].release()
  await held[1].release()
  assert.deepEqual(log, [], 'granted with a reader left')
  await held[2].release()
  const granted = await within(BOUND, w, 'the writer')
  assert.equal(granted.shared, false)
  assert.ok(granted.fence > held[2].fence)
  assert.deepEqual(log, ['writer'])
  await granted.release()
  // shared: false is the default, spelled out.
  const exclusive = await late.tryAcquire('k', { ttl: TTL, shared: false })
  assert.equal(exclusive.shared, false)
  assert.equal((await writer.list({ prefix: 'k' })).items[0].shared, false)
  await exclusive.release()
})

scenario('X2 waiters are granted in arrival order; a release wakes only the head', async (h) => {
  const holder = await h.client('h')
  const names = ['c0', 'c1', 'c2']
  const clients = []
  for (const name of names) clients.push(await h.client(name))
  const log = []
  const lease = await holder.acquire('q', { ttl: TTL })
  const waiting = []
  for (const [i, c] of clients.entries()) {
    waiting.push(waitFor(c, 'q', {}, names[i], log))
    await queued(c)
  }
  assert.deepEqual(
    clients.map((c) => [c.queuedCount(), c.waiterWakeups()]),
    [
      [1, 0],
      [1, 0],
      [1, 0],
    ],
  )
  // Nobody jumps the line, not even a try.
  assert.equal(await holder.tryAcquire('q'), null)
  await lease.release()
  let fence = lease.fence
  for (const [i, pending] of waiting.entries()) {
    const granted = await within(BOUND, pending, `${names[i]}'s grant`)
    assert.ok(granted.fence > fence)
    fence = granted.fence
    assert.deepEqual(log, names.slice(0, i + 1), 'granted out of turn')
    assert.deepEqual(
      clients.map((c) => c.waiterWakeups()),
      clients.map((_, j) => (j <= i ? 1 : 0)),
      `after grant ${i}`,
    )
    assert.equal(clients[i].queuedCount(), 0)
    await granted.release()
  }
})

scenario('shared must be a boolean; the waiting diagnostics are numbers', async (h) => {
  const c = await h.client('c')
  const bad = (promise, pattern) =>
    rejectsWith(promise, 'ACCORD_INVALID_ARGUMENT', pattern).then((e) =>
      assert.ok(e instanceof TypeError, `${e.constructor.name}: ${e.message}`),
    )
  await bad(c.acquire('k', { shared: 'yes' }), /^invalid options\.shared: expected a boolean, got a string/)
  await bad(c.tryAcquire('k', { shared: 1 }), /^invalid options\.shared: expected a boolean, got a number/)
  assert.equal(typeof c.queuedCount(), 'number')
  assert.equal(typeof c.waiterWakeups(), 'number')
  assert.deepEqual((await c.list()).items, [])
})
