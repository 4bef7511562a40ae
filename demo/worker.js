// The demo's Node worker: node worker.js URL NAMESPACE NAME TASKS (see demo/README.md).
'use strict'
const { connect } = require('../node')

const TTL = 2_000 // ms: a killed worker's task is free again after at most this long
const BATCH = 50
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const say = (event) => process.stdout.write(JSON.stringify(event) + '\n')

async function announce(client, name, announced) {
  const page = await client.list({ prefix: 'task/', state: 'done', limit: 1000 })
  for (let batch = 1; batch <= Math.floor(page.items.length / BATCH); batch++) {
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
  const remaining = Array.from({ length: Number(count) }, (_, i) => `task/${String(i).padStart(3, '0')}`)
  for (let i = remaining.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[remaining[i], remaining[j]] = [remaining[j], remaining[i]]
  }
  const announced = new Set()
  let completed = 0
  const client = await connect(url, { namespace, owner: name, ttl: TTL })
  say({ ev: 'start', worker: name, lang: 'node' })
  while (remaining.length > 0) {
    let progressed = false
    for (const key of [...remaining]) {
      let lease
      try {
        lease = await client.tryAcquire(key, { ttl: TTL })
      } catch (e) {
        if (e.code !== 'ACCORD_DONE') throw e
        remaining.splice(remaining.indexOf(key), 1)
        continue
      }
      if (!lease) continue // someone else holds it
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
      remaining.splice(remaining.indexOf(key), 1)
      completed++
      progressed = true
      await announce(client, name, announced)
    }
    if (remaining.length > 0 && !progressed) await sleep(100)
  }
  say({ ev: 'exit', worker: name, completed })
  await client.close()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
