// What the chaos run's Node workers share (worker.js, member.js): the JSON event lines they
// print for chaos/run.py, and the fenced write to chaos_resource (accord's check and the UPDATE
// in one transaction) through node-postgres (node/'s dev dependency), on whichever of
// CHAOS_WRITER_HOSTS is the primary.
'use strict'
const path = require('path')
const pg = require(path.join(__dirname, '..', '..', 'node', 'node_modules', 'pg'))

const env = process.env
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const say = (event) => process.stdout.write(JSON.stringify({ ...event, t: Date.now() / 1000 }) + '\n')
const err = (e) => String(e && e.message).slice(0, 200)
// check_fence's SQLSTATE: the fence is not the key's live grant.
const FENCE_REFUSED = 'AC001'
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

// The fenced write of `key` with `fence` as `name`: `check(client)` (accord's check_fence) and
// the UPDATE in one transaction. Whether the resource table accepted it: false when the check
// refused the lease (rolled back, nothing written) or the row's fence was not smaller.
async function write(name, key, fence, check) {
  const c = await writer()
  try {
    await c.query('BEGIN')
    try {
      await check(c)
      const r = await c.query(WRITE, [fence.toString(), name, key])
      await c.query('COMMIT')
      return r.rowCount === 1
    } catch (e) {
      await c.query('ROLLBACK')
      if (e.code === 'ACCORD_LEASE_LOST' || e.code === FENCE_REFUSED) return false
      throw e
    }
  } catch (e) {
    db = null
    c.end().catch(() => {})
    throw e
  }
}

// accord's check_fence called directly, for a lease with no `fenced` helper of its own (a
// fleet's shard): the function the helper runs.
const checkFence = (key, fence) => (c) =>
  c.query('SELECT accord.check_fence($1, $2, $3)', [env.CHAOS_NAMESPACE, key, fence.toString()])

module.exports = { env, sleep, say, err, write, checkFence }
