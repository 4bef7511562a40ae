'use strict'
// A Node member of the polyglot fleet run: opens fleet FLEET with SHARDS shards and prints
// `READY <owner>` once it is open, then one line per event, as it reads it:
//
//   ASSIGNED <shard> <fence>
//   WROTE <shard> <fence> <accepted 0|1>     (after each ASSIGNED: a fenced write on fleet_resource)
//   REVOKED <shard> <reason> <fence>
//
// On SIGTERM or at the end of standard input it closes the fleet (every shard it holds is
// revoked 'closed', printed too), closes its client, prints `CLOSED` and exits 0.
//
//   node fleet_worker.js URL NAMESPACE FLEET SHARDS TTL_MS PERIOD_MS
//
// The fenced write goes through node-postgres (`pg`, a dev dependency of node/) on the table
// fleet_resource(shard, fence, owner), which the run creates.

const path = require('node:path')

const NODE_PACKAGE = path.join(__dirname, '..', '..', 'node')
const accord = require(NODE_PACKAGE)
const pg = require(require.resolve('pg', { paths: [NODE_PACKAGE] }))

const WRITE = `INSERT INTO fleet_resource(shard, fence, owner) VALUES ($1, $2, $3)
  ON CONFLICT (shard) DO UPDATE SET fence = EXCLUDED.fence, owner = EXCLUDED.owner
  WHERE fleet_resource.fence < EXCLUDED.fence`

/** One line on standard output (synchronous on a pipe or a file: written at once). */
function say(line) {
  process.stdout.write(`${line}\n`)
}

async function main() {
  const [url, namespace, name, shardsText, ttlText, periodText] = process.argv.slice(2)
  const ttl = Number(ttlText)
  const owner = `node-${process.pid}`
  const client = await accord.connect(url, { namespace, owner, ttl })
  // The fenced resource is a PostgreSQL table the test run creates (ACCORD_FLEET_WRITES=1);
  // the demo has none.
  const db = process.env.ACCORD_FLEET_WRITES === '1' ? new pg.Client({ connectionString: url }) : null
  if (db) await db.connect()
  const fleet = await client.fleet(name, { shards: Number(shardsText), ttl, period: Number(periodText) })

  // Closing makes the fleet yield its closed revocations, then end: the loop below prints them.
  let closing = null
  const close = () => {
    closing ??= fleet.close()
  }
  process.on('SIGTERM', close)
  process.stdin.on('end', close)
  process.stdin.on('error', close)
  process.stdin.resume()

  say(`READY ${owner}`)
  // One event at a time: asking for the next one acknowledges a hand-off, so the write of an
  // assignment is done before the loop asks again.
  for (;;) {
    const event = await fleet.nextEvent()
    if (event === null) break
    if (event.type === 'assigned') {
      const fence = event.lease.fence
      say(`ASSIGNED ${event.shard} ${fence}`)
      if (db) {
        const result = await db.query(WRITE, [event.shard, String(fence), owner])
        say(`WROTE ${event.shard} ${fence} ${result.rowCount === 1 ? 1 : 0}`)
      }
    } else {
      say(`REVOKED ${event.shard} ${event.reason} ${event.fence}`)
    }
  }
  await closing
  await client.close()
  if (db) await db.end()
  say('CLOSED')
  process.exit(0)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
