// The chaos run's Node fleet member (chaos/run.py starts it; see chaos/workers/member.py for
// its lines and docs/reliability.md): opens the fleet CHAOS_FLEET of CHAOS_SHARDS shards and
// makes a fenced write for every shard assigned, until killed. The writes go through
// node-postgres, to whichever of CHAOS_WRITER_HOSTS is the primary (as worker.js does).
'use strict'
const path = require('path')
const { connect } = require(path.join(__dirname, '..', '..', 'node'))
const pg = require(path.join(__dirname, '..', '..', 'node', 'node_modules', 'pg'))

const env = process.env
const name = env.CHAOS_NAME
const ttl = Number(env.CHAOS_TTL_MS)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const say = (event) => process.stdout.write(JSON.stringify({ ...event, t: Date.now() / 1000 }) + '\n')
const err = (e) => String(e && e.message).slice(0, 200)
const WRITE = 'UPDATE chaos_resource SET fence = $1, writer = $2 WHERE key = $3 AND fence < $1'

let db = null
// node-postgres takes one host: try each, keep the one that is not in recovery.
async function writer() {
  if (db) return db
  for (const hostport of env.CHAOS_WRITER_HOSTS.split(',')) {
    const [host, port] = hostport.split(':')
    const c = new pg.Client({
      host, port: Number(port), user: env.CHAOS_PGUSER, password: env.CHAOS_PGPASSWORD,
      database: env.CHAOS_PGDATABASE, application_name: 'chaos-writer', connectionTimeoutMillis: 3000,
    })
    c.on('error', () => { if (db === c) db = null })
    try {
      await c.connect()
      const { rows } = await c.query('SELECT pg_is_in_recovery() AS r')
      if (!rows[0].r) { db = c; return c }
    } catch (e) { /* the next host */ }
    c.end().catch(() => {})
  }
  throw new Error('no primary reachable')
}

async function write(key, fence) {
  const c = await writer()
  try {
    const r = await c.query(WRITE, [fence.toString(), name, key])
    return r.rowCount === 1
  } catch (e) {
    db = null
    c.end().catch(() => {})
    throw e
  }
}

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
      const accepted = await write(key, fence)
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
