'use strict'
// The quick start on etcd: the cluster named by ACCORD_TEST_ETCD_URL (scripts/with-etcd.sh
// starts one for `make test`), under a key prefix of this test's own; skipped without it. The
// addon is built with the cargo feature `etcd`.

const assert = require('node:assert/strict')
const { randomUUID } = require('node:crypto')
const { test } = require('node:test')
const { connect } = require('..')
const { nextMessage, SEC } = require('./support')

test('the quick start on etcd: acquire, a waiter woken by the release, done, reset, notify', { timeout: 60 * SEC }, async (t) => {
  const cluster = process.env.ACCORD_TEST_ETCD_URL
  if (!cluster) {
    t.skip('ACCORD_TEST_ETCD_URL is not set (an etcd:// URL; scripts/with-etcd.sh starts a cluster)')
    return
  }
  const url = `${cluster}${cluster.includes('?') ? '&' : '?'}prefix=/accord-test/node-${randomUUID()}`
  const o1 = await connect(url, { namespace: 'reports', owner: 'o1' })
  const o2 = await connect(url, { namespace: 'reports', owner: 'o2' })
  try {
    const held = await o1.acquire('daily', { ttl: 10 * SEC, timeout: 5 * SEC })
    assert.ok(held.fence > 0n)
    assert.equal(await o2.tryAcquire('daily'), null)
    // Granted once the holder releases: within the wait's 20 s bound, long before the holder's
    // 10 s ttl would free the key by itself.
    const waiting = o2.acquire('daily', { timeout: 20 * SEC })
    await new Promise((resolve) => setTimeout(resolve, 300))
    await held.release()
    const lease = await waiting
    assert.ok(lease.fence > held.fence, `fence ${lease.fence} after ${held.fence}`)
    await lease.done({ rows: 42 })
    await assert.rejects(o1.tryAcquire('daily'), (e) => e.code === 'ACCORD_DONE')
    assert.equal(await o1.reset('daily'), true)

    const sub = await o2.listen('jobs')
    await o1.notify('jobs', 'report ready')
    assert.deepEqual(await nextMessage(sub), { type: 'message', channel: 'jobs', payload: 'report ready' })
    await sub.close()
  } finally {
    await o1.close()
    await o2.close()
  }
})
