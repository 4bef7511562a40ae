'use strict'
// A Node worker of the polyglot grant audit: tryAcquire + immediate release of one key until it
// was granted GRANTS times; prints `HAMMER <grants>`.
//
//   node hammer.js URL NAMESPACE KEY GRANTS

const path = require('node:path')
const accord = require(path.join(__dirname, '..', '..', 'node'))

async function main() {
  const [url, namespace, key, grantsText] = process.argv.slice(2)
  const grants = Number(grantsText)
  const client = await accord.connect(url, { namespace, owner: `node-${process.pid}`, ttl: 30_000 })
  let granted = 0
  try {
    while (granted < grants) {
      const lease = await client.tryAcquire(key)
      if (lease === null) continue
      granted += 1
      await lease.release()
    }
  } finally {
    await client.close()
  }
  console.log(`HAMMER ${granted}`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
