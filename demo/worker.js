// The demo's Node worker: node worker.js URL NAMESPACE NAME TASKS (see demo/README.md).
'use strict'
const { connect } = require('../node')

const TTL = 2_000 // ms: a killed worker's task is free again after at most this long
const BATCH = 50
const CLAIM = 2 // tasks claimed at once
const CLAIM_WAIT = 500 // ms a claim waits for a task to come free when none is
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const say = (event) => process.stdout.write(JSON.stringify(event) + '\n')

// Every BATCH completions, one worker notifies: the announcements are a work pool too. Whoever
// sees a batch complete offers its key to the pool `batch/` (idempotent: others may offer it
// too); whoever claims it announces it and marks it done, so each is announced once. A worker
// killed holding one loses it at its ttl, and the next claim takes it. Returns the batches
// offered so far.
async function announce(client, name, offered) {
  const { done } = await client.counts('task/')
  const ready = Math.floor(done / BATCH)
  if (ready > offered) {
    const keys = Array.from({ length: ready - offered }, (_, i) => `batch/${offered + i + 1}`)
    await client.offer('batch/', keys)
  }
  if (ready === 0) return ready
  for (const lease of await client.claim('batch/', { limit: ready, ttl: TTL })) {
    const batch = Number(lease.key.slice('batch/'.length))
    await client.notify('demo', `batch ${batch} finished by ${name}`)
    await lease.done({ worker: name })
    say({ ev: 'notify', worker: name, batch })
  }
  return ready
}

async function main() {
  const [url, namespace, name, count] = process.argv.slice(2)
  const tasks = Array.from({ length: Number(count) }, (_, i) => `task/${String(i).padStart(3, '0')}`)
  let offered = 0 // batches this worker offered so far
  let completed = 0
  const client = await connect(url, { namespace, owner: name, ttl: TTL })
  say({ ev: 'start', worker: name, lang: 'node' })
  // Every worker offers every task: an offer is idempotent (a task already offered, held or
  // done stays as it is), so whoever starts first fills the pool and the others add nothing.
  for (let i = 0; i < tasks.length; i += 5000) {
    await client.offer('task/', tasks.slice(i, i + 5000))
  }
  for (;;) {
    const leases = await client.claim('task/', { limit: CLAIM, ttl: TTL, timeout: CLAIM_WAIT })
    if (leases.length === 0) {
      // Nothing free within the wait: finished once nothing is held either (a task held by a
      // worker that died is counted free again once its ttl expired).
      const { free, held } = await client.counts('task/')
      if (free === 0 && held === 0) break
      continue
    }
    for (const lease of leases) {
      const key = lease.key
      const fence = Number(lease.fence)
      say({ ev: 'acquired', worker: name, key, fence })
      await sleep(20 + Math.random() * 40) // the "work"
      try {
        // Fenced by the core: refused (ACCORD_LEASE_LOST) if the lease was lost meanwhile.
        await lease.done({ worker: name, lang: 'node', fence })
      } catch (e) {
        if (e.code !== 'ACCORD_LEASE_LOST') throw e
        say({ ev: 'lost', worker: name, key, fence })
        continue
      }
      say({ ev: 'done', worker: name, key, fence })
      completed++
      offered = await announce(client, name, offered)
    }
  }
  say({ ev: 'exit', worker: name, completed })
  await client.close()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
