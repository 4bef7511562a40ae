'use strict'
// Fenced writes on the application's own node-postgres connection (docs/semantics.md, "Fenced
// writes in the application's transaction"): lease.fenced(client) before the writes,
// lease.doneIn(client, metadata) in the same transaction.

const assert = require('node:assert/strict')
const pg = require('pg')

const { accord, eventually, rejectsWith, scenario, SEC } = require('./support')

/** The application's table and connection, for one test. */
async function app(h) {
  const table = `node_fenced_${h.tag}`.toLowerCase()
  await h.admin.query(`CREATE TABLE ${table} (key text PRIMARY KEY, result text)`)
  const client = new pg.Client({ connectionString: h.url })
  await client.connect()
  const rows = async () =>
    (await h.admin.query(`SELECT key FROM ${table} ORDER BY key`)).rows.map((r) => r.key)
  const close = async () => {
    await client.end()
    await h.admin.query(`DROP TABLE ${table}`)
  }
  return { table, client, rows, close }
}

async function settles(lease, status) {
  assert.ok(await eventually(60 * SEC, () => lease.status === status), `the lease never became ${status}: ${lease.status}`)
}

scenario('a fenced write commits while the lease is live, and is refused once it ended', async (h) => {
  const a = await h.client('a')
  const { table, client, rows, close } = await app(h)
  try {
    const live = await a.acquire('live', { ttl: 60 * SEC })
    await client.query('BEGIN')
    await live.fenced(client)
    await client.query(`INSERT INTO ${table} VALUES ('live', 'ok')`)
    await client.query('COMMIT')
    assert.deepEqual(await rows(), ['live'])

    // Its statement made while live, the lease released: the server refuses it (AC001) as
    // ACCORD_LEASE_LOST, naming fence and key; the helper refuses it too; nothing is written.
    const gone = await a.acquire('gone', { ttl: 60 * SEC })
    const call = gone.fenceCheckSql()
    assert.deepEqual(call.params, [h.tag, 'gone', String(gone.fence)])
    await gone.release()
    await client.query('BEGIN')
    const refused = await client.query({ text: call.text, values: call.params }).catch((e) => e)
    assert.equal(refused.code, 'AC001')
    await client.query('ROLLBACK')
    await client.query('BEGIN')
    await rejectsWith(gone.fenced(client), 'ACCORD_LEASE_LOST', /is no longer held/)
    await client.query('ROLLBACK')
    assert.deepEqual(await rows(), ['live'])
    await rejectsWith(live.fenced({}), 'ACCORD_INVALID_ARGUMENT', /client/)
  } finally {
    await close()
  }
})

scenario('an expired lease taken over is refused by the server through the helper', async (h) => {
  // The client cut off from the coordinator, its lease runs out and another client takes the
  // key: the statement made while it was live is refused (AC001, "superseded"); the helper
  // passes the server's refusal on in accord's words.
  const { proxy, url } = await h.proxy()
  const a = await h.client('a', { ttl: 1 * SEC }, url)
  const b = await h.client('b')
  const { table, client, rows, close } = await app(h)
  try {
    const lease = await a.acquire('job', { ttl: 1 * SEC })
    const call = lease.fenceCheckSql()
    proxy.cut()
    const expired = await eventually(60 * SEC, async () => {
      const { rows: r } = await h.admin.query(
        'SELECT expires_at <= clock_timestamp() AS gone FROM accord.leases WHERE namespace = $1 AND key = $2',
        [h.tag, 'job'],
      )
      return r[0].gone
    })
    assert.ok(expired, 'the lease never expired on the server')
    const newer = await b.acquire('job', { ttl: 60 * SEC })
    await client.query('BEGIN')
    const refused = await client.query({ text: call.text, values: call.params }).catch((e) => e)
    assert.equal(refused.code, 'AC001')
    assert.match(refused.message, new RegExp(`superseded by fence ${newer.fence}`))
    await client.query('ROLLBACK')
    await client.query('BEGIN')
    await rejectsWith(lease.fenced(client), 'ACCORD_LEASE_LOST')
    await client.query('ROLLBACK')
    assert.deepEqual(await rows(), [])
    proxy.pass()
  } finally {
    await close()
  }
})

scenario('doneIn commits with the write or not at all', async (h) => {
  const a = await h.client('a')
  const b = await h.client('b')
  const { table, client, rows, close } = await app(h)
  try {
    const kept = await a.acquire('kept', { ttl: 60 * SEC })
    await client.query('BEGIN')
    await client.query(`INSERT INTO ${table} VALUES ('kept', 'ok')`)
    assert.deepEqual(await kept.doneIn(client, { r: 1 }), { r: 1 })
    // The server's refusal through the helper: the key is done in this very transaction.
    await rejectsWith(kept.fenced(client), 'ACCORD_LEASE_LOST', /the key is done/)
    await client.query('ROLLBACK')
    assert.deepEqual(await rows(), [])
    assert.equal(kept.status, 'held')
    assert.equal(await b.tryAcquire('kept'), null)
    await kept.renew()

    const job = await a.acquire('job', { ttl: 60 * SEC })
    await client.query('BEGIN')
    await job.fenced(client)
    await client.query(`INSERT INTO ${table} VALUES ('job', 'ok')`)
    await job.doneIn(client)
    await client.query('COMMIT')
    await settles(job, 'done')
    assert.deepEqual(await rows(), ['job'])
    await rejectsWith(b.tryAcquire('job'), 'ACCORD_DONE')
    assert.equal(kept.status, 'held')
    assert.equal(a.stats().lost, 0)
  } finally {
    await close()
  }
})

scenario('the embedded store has no fenced writes', async (h) => {
  const c = await accord.connect('memory:node-fenced')
  const client = new pg.Client({ connectionString: h.url })
  try {
    const lease = await c.tryAcquire('k')
    assert.throws(() => lease.fenceCheckSql(), (e) => e.code === 'ACCORD_UNSUPPORTED' && /PostgreSQL/.test(e.message))
    await rejectsWith(lease.fenced(client), 'ACCORD_UNSUPPORTED', /PostgreSQL/)
    await rejectsWith(lease.doneIn(client), 'ACCORD_UNSUPPORTED', /PostgreSQL/)
  } finally {
    await c.close()
  }
})
