'use strict'
// Stats (docs/semantics.md, "Stats: what a client did"): after a known sequence the counters
// are exact; histograms are plain objects in milliseconds.

const assert = require('node:assert/strict')
const { scenario, SEC, sleep } = require('./support')

const HISTOGRAM_KEYS = ['count', 'sumMs', 'maxMs', 'p50Ms', 'p99Ms']

scenario('stats count what the client did', async (h) => {
  const o1 = await h.client('o1')
  const o2 = await h.client('o2')
  const fresh = o1.stats()
  assert.equal(fresh.acquires, 0)
  assert.equal(fresh.grants, 0)
  assert.deepEqual(fresh.holdTime, { count: 0, sumMs: 0, maxMs: 0, p50Ms: 0, p99Ms: 0 })

  const lease = await o1.tryAcquire('a', { ttl: 60 * SEC })
  assert.ok(lease)
  assert.equal(await o2.tryAcquire('a', { ttl: 60 * SEC }), null)
  await sleep(20)
  await lease.release()

  const s1 = o1.stats()
  assert.deepEqual(
    [s1.acquires, s1.grants, s1.refusals, s1.releases],
    [1, 1, 0, 1],
  )
  assert.deepEqual(
    [s1.timeouts, s1.cancellations, s1.lost, s1.done, s1.notifications],
    [0, 0, 0, 0, 0],
  )
  for (const name of ['acquireWait', 'holdTime', 'statementTime', 'keepaliveTick']) {
    assert.deepEqual(Object.keys(s1[name]).sort(), [...HISTOGRAM_KEYS].sort(), name)
  }
  assert.equal(s1.acquireWait.count, 1)
  const hold = s1.holdTime
  assert.equal(hold.count, 1)
  // Milliseconds: held for at least the 20 ms slept, and well under a minute.
  assert.ok(hold.maxMs >= 20 && hold.maxMs < 60 * SEC, `held ${hold.maxMs} ms`)
  assert.equal(hold.sumMs, hold.maxMs)
  assert.ok(hold.p50Ms <= hold.maxMs && hold.p99Ms <= hold.maxMs)
  assert.ok(s1.statements >= 2)
  assert.equal(s1.statementTime.count, s1.statements)

  const s2 = o2.stats()
  assert.deepEqual(
    [s2.acquires, s2.grants, s2.refusals, s2.releases],
    [1, 0, 1, 0],
  )
  assert.equal(s2.acquireWait.count, 0)
  assert.equal(s2.statementTime.count, s2.statements)

  // A closed client still answers, with what it did.
  await o2.close()
  const closed = o2.stats()
  assert.deepEqual([closed.acquires, closed.refusals], [1, 1])
})
