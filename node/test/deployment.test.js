'use strict'
// O1: accord behind a real PgBouncer (scripts/with-postgres.sh starts one in front of the test
// database). Transaction pooling carries commands but not LISTEN: listen there fails naming
// listen_url, and with listenUrl naming the server directly a client hears again. Clients there
// send their statements unprepared (prepareStatements: false). The embedded store has no
// listening connection: listenUrl is refused there.

const assert = require('node:assert/strict')
const { test } = require('node:test')
const pg = require('pg')
const { accord, nextMessage, rejectsWith, scenario } = require('./support')

/** The PgBouncer pool of this mode, or null (the test skips). The test cluster of `make test`
 * always has one: there, a missing one fails the test rather than skipping it. */
function bouncer(mode, t) {
  const url = process.env[`ACCORD_TEST_PGBOUNCER_${mode}_URL`]
  if (!url) {
    assert.ok(
      !process.env.ACCORD_TEST_PGDATA,
      'the test cluster has no PgBouncer: install it (apt-get install pgbouncer)',
    )
    t.skip(`no PgBouncer (ACCORD_TEST_PGBOUNCER_${mode}_URL is not set)`)
    return null
  }
  return url
}

scenario('O1 transaction pooling: listen fails naming listen_url, listenUrl hears', async (h, t) => {
  const pooler = bouncer('TRANSACTION', t)
  if (!pooler) return
  // A schema of this test's own: accord's statements name it, so that any of them left
  // prepared on the pool's server connection can be told from others'. Clients of the pool
  // send their statements unprepared (PgBouncer before 1.21 cannot carry prepared ones here).
  const schema = `node_o1_${h.tag}`.toLowerCase()
  const pooled = (extra = {}) => ({ schema, prepareStatements: false, ...extra })
  try {
    const ch = h.channel('ch')
    const deaf = await h.client('deaf', pooled(), pooler)
    await rejectsWith(deaf.listen(ch), 'ACCORD_CONNECTION', /listen_url/)
    // Commands through the pooler, LISTEN straight to the server.
    const listener = await h.client('listener', pooled({ listenUrl: h.url }), pooler)
    const sender = await h.client('sender', pooled(), pooler)
    const sub = await listener.listen(ch)
    await sender.notify(ch, 'through the pooler')
    assert.deepEqual(await nextMessage(sub), { type: 'message', channel: ch, payload: 'through the pooler' })
    await sub.close()
    // prepareStatements reached the core: while the clients are open, nothing of the schema is
    // prepared on the pool's one server connection (which a session through the pool sees).
    const probe = new pg.Client({ connectionString: pooler })
    await probe.connect()
    try {
      const { rows } = await probe.query(
        'SELECT count(*)::int AS n FROM pg_prepared_statements WHERE statement LIKE $1',
        [`%${schema}%`],
      )
      assert.equal(rows[0].n, 0, `statements of ${schema} left prepared`)
    } finally {
      await probe.end()
    }
  } finally {
    await Promise.allSettled(h.clients.map((c) => c.close()))
    await h.admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
  }
})

test('listenUrl is refused on the embedded store', async () => {
  await rejectsWith(
    accord.connect('memory:node-listen-url', { listenUrl: 'postgres://localhost/x' }),
    'ACCORD_INVALID_ARGUMENT',
    /listenUrl/,
  )
})
