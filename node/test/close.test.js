'use strict'
// Closing a client ends its leases (docs/semantics.md, G12): the leases held at the close are
// given back and their `lost` Promise resolves; afterwards renew, release and done on any lease
// of the client reject with ACCORD_CLOSED, and so does disposal.

const assert = require('node:assert/strict')
const { rejectsWith, scenario, SEC, within } = require('./support')

scenario('close ends every lease: lost fires, later calls reject with ACCORD_CLOSED', async (h) => {
  const o1 = await h.client('o1')
  const held = await o1.acquire('held', { ttl: 60 * SEC })
  const released = await o1.acquire('released', { ttl: 60 * SEC })
  await released.release()
  await o1.close()
  await within(20 * SEC, held.lost)
  assert.equal(held.isLost, true)
  assert.equal(released.isLost, false)
  for (const lease of [held, released]) {
    await rejectsWith(lease.renew(), 'ACCORD_CLOSED')
    await rejectsWith(lease.release(), 'ACCORD_CLOSED')
    await rejectsWith(lease.done(), 'ACCORD_CLOSED')
    await rejectsWith(lease[Symbol.asyncDispose](), 'ACCORD_CLOSED')
  }
  const o2 = await h.client('o2')
  assert.notEqual(await o2.tryAcquire('held', { ttl: 60 * SEC }), null)
})
