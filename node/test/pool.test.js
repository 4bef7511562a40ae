'use strict'
// Work pools and semaphores (P1, P3, P4, P6 of docs/semantics.md) through the Node API, on
// PostgreSQL and on the embedded memory: store; bad input refused naming the field.

const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const { test } = require('node:test')
const { accord, handled, rejectsWith, scenario, SEC, within } = require('./support')

const keys = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix}${String(i).padStart(5, '0')}`)

/**
 * Runs `fn(client)` on each store: `client(owner)` connects a client of the test's own
 * namespace (PostgreSQL) or memory store. Every client is closed afterwards, which releases
 * whatever a failed test left held.
 */
function onEveryStore(name, fn) {
  scenario(`${name} (postgres)`, (h) => fn((owner) => h.client(owner)))
  test(`${name} (memory)`, { timeout: 60 * SEC }, async () => {
    const url = `memory:node-pool-${crypto.randomBytes(4).toString('hex')}`
    const clients = []
    try {
      await fn(async (owner) => {
        const c = await accord.connect(url, { owner })
        clients.push(c)
        return c
      })
    } finally {
      await Promise.allSettled(clients.map((c) => c.close()))
    }
  })
}

const released = (leases) => Promise.all(leases.map((l) => l.release()))

onEveryStore('P1 offer registers keys as free, counts them, and is idempotent', async (client) => {
  const c = await client('o1')
  const tasks = keys('task/', 200)
  assert.equal(await c.offer('task/', tasks), 200)
  assert.deepEqual(await c.counts('task/'), { free: 200, held: 0, done: 0 })
  const claimed = await c.claim('task/', { limit: 2, ttl: 60 * SEC })
  assert.equal(claimed.length, 2)
  await claimed[0].done({ by: 'o1' })
  assert.equal(await c.offer('task/', tasks, { fresh: true }), 0)
  assert.deepEqual(await c.counts('task/'), { free: 198, held: 1, done: 1 })
  assert.equal(claimed[1].status, 'held')
  // Another prefix is another pool.
  assert.deepEqual(await c.counts('other/'), { free: 0, held: 0, done: 0 })
  await claimed[1].release()
  assert.deepEqual(await c.counts('task/'), { free: 199, held: 0, done: 1 })
})

onEveryStore('P3 a claim of 50 gets 50 distinct keys of the pool, as ordinary leases', async (client) => {
  const a = await client('a')
  const b = await client('b')
  assert.equal(await a.offer('job/', keys('job/', 100), { kind: 'job' }), 100)
  const first = await a.claim('job/', { limit: 50, ttl: 60 * SEC, metadata: { by: 'a' } })
  const second = await b.claim('job/', { limit: 50, ttl: 60 * SEC })
  try {
    assert.equal(first.length, 50)
    assert.equal(second.length, 50)
    const all = [...first, ...second]
    assert.equal(new Set(all.map((l) => l.key)).size, 100, 'no key claimed twice')
    assert.equal(new Set(all.map((l) => l.fence)).size, 100, 'a fence per grant')
    for (const lease of first) {
      assert.ok(lease instanceof accord.Lease)
      assert.ok(lease.key.startsWith('job/'))
      assert.equal(lease.owner, 'a')
      assert.equal(typeof lease.fence, 'bigint')
      assert.equal(lease.ttl, 60 * SEC)
      assert.deepEqual(lease.metadata, { kind: 'job', by: 'a' })
      assert.equal(lease.status, 'held')
    }
    assert.deepEqual(await b.counts('job/'), { free: 0, held: 100, done: 0 })
    // Exhausted: an empty answer, not an error, at once without a timeout.
    assert.deepEqual(await b.claim('job/', { limit: 5 }), [])
  } finally {
    await released([...first, ...second])
  }
  assert.deepEqual(await a.counts('job/'), { free: 100, held: 0, done: 0 })
})

onEveryStore('P4 a waiting claim is woken by a release in its pool', async (client) => {
  const a = await client('a')
  const b = await client('b')
  await a.offer('one/', ['one/k'])
  const [held] = await a.claim('one/', { ttl: 60 * SEC })
  assert.ok(held)
  // With a short timeout and nothing released: empty once the timeout passed.
  assert.deepEqual(await b.claim('one/', { timeout: 200 }), [])
  const waiting = handled(b.claim('one/', { timeout: 60 * SEC, ttl: 60 * SEC }))
  await held.release()
  const got = await within(30 * SEC, waiting, 'the waiting claim')
  assert.equal(got.length, 1)
  assert.equal(got[0].key, 'one/k')
  assert.equal(got[0].owner, 'b')
  assert.ok(got[0].fence > held.fence)
  await got[0].release()
})

onEveryStore('a waiting claim ends with ACCORD_CANCELLED when its signal aborts', async (client) => {
  const a = await client('a')
  await a.offer('c/', ['c/k'])
  const [held] = await a.claim('c/', { ttl: 60 * SEC })
  await rejectsWith(a.claim('c/', { timeout: 60 * SEC, signal: AbortSignal.abort() }), 'ACCORD_CANCELLED', /claim of "c\/"/)
  const controller = new AbortController()
  const waiting = handled(a.claim('c/', { timeout: 60 * SEC, signal: controller.signal }))
  controller.abort()
  await within(30 * SEC, rejectsWith(waiting, 'ACCORD_CANCELLED'), 'the cancelled claim')
  await held.release()
  assert.deepEqual(await a.counts('c/'), { free: 1, held: 0, done: 0 })
})

onEveryStore('P6 a semaphore of 3 lets 3 of 5 contenders hold; acquire times out', async (client) => {
  const contenders = await Promise.all([1, 2, 3, 4, 5].map((i) => client(`w${i}`)))
  const semaphores = await Promise.all(contenders.map((c) => c.semaphore('gpu', 3)))
  assert.ok(semaphores[0] instanceof accord.Semaphore)
  assert.equal(semaphores[0].name, 'gpu')
  assert.equal(semaphores[0].limit, 3)
  const got = await Promise.all(semaphores.map((s) => s.tryAcquire({ ttl: 60 * SEC })))
  const holders = got.filter((l) => l !== null)
  try {
    assert.equal(holders.length, 3)
    assert.equal(got.filter((l) => l === null).length, 2)
    assert.equal(new Set(holders.map((l) => l.key)).size, 3, 'a permit each')
    const loser = semaphores[got.indexOf(null)]
    await rejectsWith(loser.acquire({ timeout: 200 }), 'ACCORD_TIMEOUT', /gpu/)
    await rejectsWith(loser.acquire({ signal: AbortSignal.abort() }), 'ACCORD_CANCELLED')
    const controller = new AbortController()
    const aborted = handled(loser.acquire({ signal: controller.signal }))
    controller.abort()
    await within(30 * SEC, rejectsWith(aborted, 'ACCORD_CANCELLED'), 'the cancelled acquire')
    // A release lets a waiting contender in, with the permit given back.
    const waiting = handled(loser.acquire({ timeout: 60 * SEC, ttl: 60 * SEC, metadata: { n: 1 } }))
    const freed = holders.shift()
    await freed.release()
    const lease = await within(30 * SEC, waiting, 'the waiting acquire')
    holders.push(lease)
    assert.equal(lease.key, freed.key)
    assert.ok(lease.fence > freed.fence)
    assert.deepEqual(lease.metadata, { n: 1 })
    assert.equal(await loser.tryAcquire(), null)
  } finally {
    await released(holders)
  }
})

onEveryStore('bad input is refused with ACCORD_INVALID_ARGUMENT naming the field', async (client) => {
  const c = await client('o1')
  const bad = (promise, pattern, type = Error) =>
    rejectsWith(promise, 'ACCORD_INVALID_ARGUMENT', pattern).then((e) =>
      assert.ok(e instanceof type, `${e.constructor.name}: ${e.message}`),
    )
  await bad(c.offer('', ['x']), /invalid prefix/)
  await bad(c.offer('p/', ['q/1']), /invalid key: "q\/1" is not under the prefix "p\/"/)
  await bad(c.offer('p/', ['p/']), /invalid key/)
  await bad(c.offer(1, ['p/1']), /invalid prefix: expected a string, got a number/, TypeError)
  await bad(c.offer('p/', 'p/1'), /invalid keys: expected an array of strings, got a string/, TypeError)
  await bad(c.offer('p/', ['p/1', 2]), /invalid keys\[1\]: expected a string, got a number/, TypeError)
  await bad(c.offer('p/', keys('p/', 5001)), /invalid keys/)
  await bad(c.offer('p/', ['p/1'], 'meta'), /invalid metadata: expected an object/, TypeError)
  await bad(c.claim(''), /invalid prefix/)
  await bad(c.claim('p/', { limit: 0 }), /^invalid limit: 0 is outside 1\.\.=1000$/)
  await bad(c.claim('p/', { limit: 1001 }), /^invalid limit: 1001 is outside 1\.\.=1000$/)
  await bad(c.claim('p/', { limit: 1.5 }), /invalid options\.limit: 1\.5 is not an integer/)
  await bad(c.claim('p/', { limit: '2' }), /invalid options\.limit: expected a number/, TypeError)
  await bad(c.claim('p/', { ttl: 5 }), /ttl/)
  await bad(c.claim('p/', { timeout: -1 }), /options\.timeout: -1 ms is negative/)
  await bad(c.claim('p/', { timeout: Infinity }), /invalid options\.timeout: must be finite for a claim/)
  await bad(c.claim('p/', { signal: {} }), /options\.signal: expected an AbortSignal/)
  await bad(c.claim('p/', 3), /invalid options: expected an object, got a number/, TypeError)
  await bad(c.counts(''), /invalid prefix/)
  await bad(c.counts(), /invalid prefix: expected a string, got undefined/, TypeError)
  await bad(c.semaphore('s', 0), /^invalid limit: 0 is outside 1\.\.=10000$/)
  await bad(c.semaphore('s', 10001), /^invalid limit: 10001 is outside 1\.\.=10000$/)
  await bad(c.semaphore('s'), /invalid limit: expected a number, got undefined/, TypeError)
  await bad(c.semaphore('', 2), /invalid name/)
  const s = await c.semaphore('s', 1)
  await bad(s.acquire({ timeout: 'soon' }), /options\.timeout: expected a number/, TypeError)
  await bad(s.tryAcquire({ metadata: [1] }), /options\.metadata/)
  // Nothing was offered, claimed or held by any of the refused calls.
  assert.deepEqual(await c.counts('p/'), { free: 0, held: 0, done: 0 })
  assert.ok(await s.tryAcquire().then((l) => l.release()).then(() => true), 'its permit is free')
  assert.equal((await c.list({ state: 'held' })).items.length, 0, 'nothing held')
})

test('Semaphore cannot be built by hand', () => {
  assert.equal(typeof accord.Semaphore, 'function')
  assert.throws(() => new accord.Semaphore())
})
