'use strict'
// How a lease ends, as the core says it (docs/semantics.md, G4 and G12): `status` and
// `lostReason`, and the `lost` Promise, which resolves only if the lease ended lost. A release
// that failed on the way leaves the lease watched: lost at its deadline unless a retry succeeds.

const assert = require('node:assert/strict')
const { rejectsWith, scenario, SEC, within } = require('./support')

scenario('status and lostReason follow a lease through release, done and close', async (h) => {
  const o1 = await h.client('o1')
  const released = await o1.acquire('released', { ttl: 60 * SEC })
  assert.equal(released.status, 'held')
  assert.equal(released.lostReason, null)
  void released.lost
  await released.release()
  assert.equal(released.status, 'released')
  assert.equal(released.lostReason, null)
  assert.equal(released.isLost, false)

  const done = await o1.acquire('done', { ttl: 60 * SEC })
  await done.done({ n: 1 })
  assert.equal(done.status, 'done')
  assert.equal(done.lostReason, null)

  const held = await o1.acquire('held', { ttl: 60 * SEC })
  await o1.close()
  await within(20 * SEC, held.lost, 'lost of a lease held at close')
  assert.equal(held.status, 'lost')
  assert.equal(held.lostReason, 'client_closed')
  assert.equal(held.isLost, true)
  // Ended leases keep their status.
  assert.equal(released.status, 'released')
  assert.equal(done.status, 'done')
})

scenario('a failed release leaves the lease ending, and lost resolves at its deadline', async (h) => {
  const { proxy, url } = await h.proxy()
  const o1 = await h.client('o1', {}, url)
  const lease = await o1.acquire('a', { ttl: 4 * SEC })
  const lost = lease.lost
  let fired = false
  lost.then(() => (fired = true))
  proxy.cut()
  await rejectsWith(lease.release(), 'ACCORD_CONNECTION')
  assert.equal(lease.status, 'ending', 'no longer renewed, still watched')
  assert.equal(lease.lostReason, null)
  assert.equal(fired, false)
  // The deadline is under 4 s away; 20 s only bounds a hang.
  await within(20 * SEC, lost, 'lost after a failed release')
  assert.equal(lease.status, 'lost')
  assert.equal(lease.lostReason, 'not_renewed')
  proxy.pass()
  await rejectsWith(lease.release(), 'ACCORD_LEASE_LOST')
})
