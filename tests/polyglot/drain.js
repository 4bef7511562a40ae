'use strict'
// A Node worker of the polyglot pool run: claim BATCH → 1 ms of work → done, until the pool is
// empty. Prints `CLAIMED <n>` after its first claim and waits for a line on stdin before it
// works (the run starts the work once every worker holds keys), then `DONE <key> <fence>` per
// key, and at the end `STATS <claims> <their calls> <all calls>` (claim calls, the store calls
// made during them, the client's calls in all: its stats' `statements`) and `DRAINED <n>`.
//
//   node drain.js URL NAMESPACE PREFIX BATCH

const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const readline = require('node:readline')
const accord = require(path.join(__dirname, '..', '..', 'node'))

/** Resolves with the next line of standard input (or at its end). */
function nextLine() {
  return new Promise((resolve) => {
    const lines = readline.createInterface({ input: process.stdin })
    const done = () => {
      lines.close()
      resolve()
    }
    lines.once('line', done)
    lines.once('close', resolve)
  })
}

async function main() {
  const [url, namespace, prefix, batchText] = process.argv.slice(2)
  const limit = Number(batchText)
  const client = await accord.connect(url, { namespace, owner: `node-${process.pid}`, ttl: 30_000 })
  let finished = 0
  let first = true
  // The claims' share of the client's calls to the store (`STATS`).
  let claims = 0
  let claimCalls = 0
  try {
    for (;;) {
      const before = client.stats().statements
      const leases = await client.claim(prefix, { limit, ttl: 30_000, timeout: 200 })
      claims += 1
      claimCalls += client.stats().statements - before
      if (first) {
        first = false
        console.log(`CLAIMED ${leases.length}`)
        await nextLine()
      }
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
    console.log(`STATS ${claims} ${claimCalls} ${client.stats().statements}`)
  } finally {
    await client.close()
  }
  console.log(`DRAINED ${finished}`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
