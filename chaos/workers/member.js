// The chaos run's Node fleet member (chaos/run.py starts it; see chaos/workers/member.py for
// its lines and docs/reliability.md): opens the fleet CHAOS_FLEET of CHAOS_SHARDS shards and
// makes a fenced write for every shard assigned, until killed. The writes go through
// node-postgres, to whichever of CHAOS_WRITER_HOSTS is the primary (as worker.js does).
'use strict'
const path = require('path')
const { connect } = require(path.join(__dirname, '..', '..', 'node'))
const { env, sleep, say, err, write: fencedWrite, checkFence } = require('./fenced_write')

const name = env.CHAOS_NAME
const ttl = Number(env.CHAOS_TTL_MS)

async function main() {
  let fleet
  // The server may be restarting or failing over when a worker starts.
  for (;;) {
    try {
      const client = await connect(env.CHAOS_URL, { namespace: env.CHAOS_NAMESPACE, owner: name, ttl })
      fleet = await client.fleet(env.CHAOS_FLEET, { shards: Number(env.CHAOS_SHARDS), ttl })
      break
    } catch (e) {
      say({ ev: 'error', op: 'connect', err: err(e) })
      await sleep(500)
    }
  }
  say({ ev: 'start', w: name })
  // One event at a time: asking for the next one acknowledges a hand-off, so the write of an
  // assignment is made first.
  for (;;) {
    const event = await fleet.nextEvent()
    if (event === null) break
    if (event.type === 'revoked') {
      say({ ev: 'revoked', shard: event.shard, reason: event.reason, fence: Number(event.fence) })
      continue
    }
    const { key } = event.lease
    const fence = event.lease.fence
    say({ ev: 'assigned', key, shard: event.shard, fence: Number(fence) })
    try {
      const accepted = await fencedWrite(name, key, fence, checkFence(key, fence))
      say({ ev: 'write', key, fence: Number(fence), accepted })
    } catch (e) {
      say({ ev: 'write_error', key, fence: Number(fence), err: err(e) })
    }
  }
  throw new Error('the fleet ended')
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
