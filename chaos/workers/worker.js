// The chaos run's Node worker (chaos/run.py starts it; see chaos/workers/worker.py for the loop
// and docs/reliability.md). Its fenced writes go through node-postgres (node/'s dev dependency),
// connected to whichever of CHAOS_WRITER_HOSTS is the primary.
'use strict'
const path = require('path')
const { connect } = require(path.join(__dirname, '..', '..', 'node'))
const pg = require(path.join(__dirname, '..', '..', 'node', 'node_modules', 'pg'))

const env = process.env
const name = env.CHAOS_NAME
const keys = env.CHAOS_KEYS.split(',')
const ttl = Number(env.CHAOS_TTL_MS)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const say = (event) => process.stdout.write(JSON.stringify({ ...event, t: Date.now() / 1000 }) + '\n')
const pick = (list) => list[Math.floor(Math.random() * list.length)]
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
  let client
  // The server may be restarting or failing over when a worker starts.
  for (;;) {
    try {
      client = await connect(env.CHAOS_URL, { namespace: env.CHAOS_NAMESPACE, owner: name, ttl })
      break
    } catch (e) {
      say({ ev: 'error', op: 'connect', err: String(e.message).slice(0, 200) })
      await sleep(500)
    }
  }
  say({ ev: 'start', w: name })
  for (;;) {
    const key = pick(keys)
    let lease
    try {
      lease = await client.acquire(key, { ttl, timeout: 3000 })
    } catch (e) {
      if (e.code !== 'ACCORD_TIMEOUT') {
        say({ ev: 'error', op: 'acquire', err: String(e.message).slice(0, 200) })
        await sleep(200)
      }
      continue
    }
    const fence = lease.fence
    say({ ev: 'granted', key, fence: Number(fence) })
    lease.lost.then(() => say({ ev: 'lost', key, fence: Number(fence), how: 'signal' }), () => {})
    await sleep(20 + Math.random() * 130)
    try {
      const accepted = await write(key, fence)
      say({ ev: 'write', key, fence: Number(fence), accepted })
    } catch (e) {
      say({ ev: 'write_error', key, fence: Number(fence), err: String(e.message).slice(0, 200) })
    }
    await sleep(10 + Math.random() * 40)
    try {
      await lease.release()
      say({ ev: 'released', key, fence: Number(fence) })
    } catch (e) {
      if (e.code === 'ACCORD_LEASE_LOST') say({ ev: 'lost', key, fence: Number(fence), how: 'release' })
      else say({ ev: 'error', op: 'release', err: String(e.message).slice(0, 200) })
    }
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
