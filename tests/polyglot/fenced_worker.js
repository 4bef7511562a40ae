'use strict'
// A Node writer of the polyglot fenced run (tests/polyglot/fenced.py): loops acquire one of KEYS
// (ttl TTL_MS) → `HELD <key> <fence>` → waits for a line on standard input → inserts
// (key, fence, writer) into TABLE, which accord's trigger `fenced_write` guards →
// `WROTE <key> <fence> <1|0>` (accepted, or refused with AC001) → release. It ends at the end of
// its standard input.
//
//   node fenced_worker.js URL NAMESPACE fenced KEYS TTL_MS TABLE

const path = require('node:path')
const readline = require('node:readline')
const accord = require(path.join(__dirname, '..', '..', 'node'))
const pg = require(path.join(__dirname, '..', '..', 'node', 'node_modules', 'pg'))

// The trigger's SQLSTATE: the row's fence is not its key's live grant.
const FENCE_REFUSED = 'AC001'

async function main() {
  const [url, namespace, , keysText, ttlText, table] = process.argv.slice(2)
  const keys = keysText.split(',')
  const ttl = Number(ttlText)
  const owner = `node-${process.pid}`
  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]()
  const client = await accord.connect(url, { namespace, owner, ttl })
  const db = new pg.Client({ connectionString: url })
  await db.connect()
  const insert = `INSERT INTO "${table.replaceAll('"', '""')}" (key, fence, writer) VALUES ($1, $2, $3)`
  try {
    for (;;) {
      const key = keys[Math.floor(Math.random() * keys.length)]
      let lease
      try {
        lease = await client.acquire(key, { ttl, timeout: 10_000 })
      } catch (e) {
        if (e.code === 'ACCORD_TIMEOUT') continue
        throw e
      }
      console.log(`HELD ${key} ${lease.fence}`)
      if ((await lines.next()).done) return
      let accepted = 1
      try {
        await db.query(insert, [key, lease.fence.toString(), owner])
      } catch (e) {
        if (e.code !== FENCE_REFUSED) throw e
        accepted = 0
      }
      console.log(`WROTE ${key} ${lease.fence} ${accepted}`)
      await lease.release().catch((e) => {
        if (e.code !== 'ACCORD_LEASE_LOST') throw e
      })
    }
  } finally {
    await db.end()
    await client.close()
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  },
)
