'use strict'
// A Node worker of the polyglot pool run: claim BATCH → 1 ms of work → done, until the pool is
// empty; prints `DONE <key> <fence>` per key and `DRAINED <n>` at the end.
//
//   node drain.js URL NAMESPACE PREFIX BATCH

const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const accord = require(path.join(__dirname, '..', '..', 'node'))

async function main() {
  const [url, namespace, prefix, batchText] = process.argv.slice(2)
  const limit = Number(batchText)
  const client = await accord.connect(url, { namespace, owner: `node-${process.pid}`, ttl: 30_000 })
  let finished = 0
  try {
    for (;;) {
      const leases = await client.claim(prefix, { limit, ttl: 30_000, timeout: 200 })
      if (leases.length === 0) {
        const counts = await client.counts(prefix)
        if (counts.free + counts.held === 0) break
        continue
      }
      for (const lease of leases) {
        await sleep(1)
        console.log(`DONE ${lease.key} ${lease.fence}`)
        await lease.done()
        finished += 1
      }
    }
  } finally {
    await client.close()
  }
  console.log(`DRAINED ${finished}`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
