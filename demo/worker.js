// The demo's Node worker: node worker.js URL NAMESPACE NAME TASKS (see demo/README.md).
'use strict'
const { connect } = require('../node')

const TTL = 2_000 // ms: a killed worker's task is free again after at most this long
const BATCH = 50
const CLAIM = 2 // tasks claimed at once
const CLAIM_WAIT = 500 // ms a claim waits for a task to come free when none is
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const say = (event) => process.stdout.write(JSON.stringify(event) + '\n')

async function announce(client, name, announced) {
  const { done } = await client.counts('task/')
  for (let batch = 1; batch <= Math.floor(done / BATCH); batch++) {
    if (announced.has(batch)) continue
    let lease
    try {
      lease = await client.tryAcquire(`batch/${batch}`)
    } catch (e) {
      if (e.code !== 'ACCORD_DONE') throw e
      announced.add(batch)
      continue
    }
    if (!lease) continue
    await client.notify('demo', `batch ${batch} finished by ${name}`)
    await lease.done({ worker: name })
    say({ ev: 'notify', worker: name, batch })
    announced.add(batch)
  }
}

async function main() {
  const [url, namespace, name, count] = process.argv.slice(2)
  const tasks = Array.from({ length: Number(count) }, (_, i) => `task/${String(i).padStart(3, '0')}`)
  const announced = new Set()
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
      await announce(client, name, announced)
    }
  }
  say({ ev: 'exit', worker: name, completed })
  await client.close()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
