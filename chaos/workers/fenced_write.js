// What the chaos run's Node workers share (worker.js, member.js): the JSON event lines they
// print for chaos/run.py, and the fenced write to chaos_resource through node-postgres
// (node/'s dev dependency), on whichever of CHAOS_WRITER_HOSTS is the primary.
'use strict'
const path = require('path')
const pg = require(path.join(__dirname, '..', '..', 'node', 'node_modules', 'pg'))

const env = process.env
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

// The write fenced by `fence` of `key` as `name`: whether the resource table accepted it.
async function write(name, key, fence) {
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

module.exports = { env, sleep, say, err, write }
