// The chaos run's Node worker (chaos/run.py starts it; see chaos/workers/worker.py for the loop
// and docs/reliability.md). Its fenced writes go through node-postgres (node/'s dev dependency),
// connected to whichever of CHAOS_WRITER_HOSTS is the primary.
'use strict'
const path = require('path')
const { connect } = require(path.join(__dirname, '..', '..', 'node'))
const { env, sleep, say, err, write: fencedWrite } = require('./fenced_write')

const name = env.CHAOS_NAME
const keys = env.CHAOS_KEYS.split(',')
const ttl = Number(env.CHAOS_TTL_MS)
const pick = (list) => list[Math.floor(Math.random() * list.length)]

async function main() {
  let client
  // The server may be restarting or failing over when a worker starts.
  for (;;) {
    try {
      client = await connect(env.CHAOS_URL, { namespace: env.CHAOS_NAMESPACE, owner: name, ttl })
      break
    } catch (e) {
      say({ ev: 'error', op: 'connect', err: err(e) })
      await sleep(500)
    }
  }
  say({ ev: 'start', w: name })
  for (;;) {
    const key = pick(keys)
    let lease
    try {
      lease = await client.acquire(key, { ttl, timeout: 3000 })
    } catch (e) {
      if (e.code !== 'ACCORD_TIMEOUT') {
        say({ ev: 'error', op: 'acquire', err: err(e) })
        await sleep(200)
      }
      continue
    }
    const fence = lease.fence
    say({ ev: 'granted', key, fence: Number(fence) })
    lease.lost.then(() => say({ ev: 'lost', key, fence: Number(fence), how: 'signal' }), () => {})
    await sleep(20 + Math.random() * 130)
    try {
      const accepted = await fencedWrite(name, key, fence, (c) => lease.fenced(c))
      say({ ev: 'write', key, fence: Number(fence), accepted })
    } catch (e) {
      say({ ev: 'write_error', key, fence: Number(fence), err: err(e) })
    }
    await sleep(10 + Math.random() * 40)
    try {
      await lease.release()
      say({ ev: 'released', key, fence: Number(fence) })
    } catch (e) {
      if (e.code === 'ACCORD_LEASE_LOST') say({ ev: 'lost', key, fence: Number(fence), how: 'release' })
      else say({ ev: 'error', op: 'release', err: err(e) })
    }
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
