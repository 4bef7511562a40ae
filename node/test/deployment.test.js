'use strict'
// O1: accord behind a real PgBouncer (scripts/with-postgres.sh starts one in front of the test
// database). Transaction pooling carries commands but not LISTEN: listen there fails naming
// listen_url, and with listenUrl naming the server directly a client hears again. The embedded
// store has no listening connection: listenUrl is refused there.

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
  // PgBouncer before 1.21 leaves every statement prepared through this pool on its one server
  // connection, and the names (s1, s2, …) start over in every process: what an earlier process
  // left there ("prepared statement s8 already exists") is cleared first.
  const plain = new pg.Client({ connectionString: pooler })
  await plain.connect()
  await plain.query('DEALLOCATE ALL')
  await plain.end()
  const ch = h.channel('ch')
  const deaf = await h.client('deaf', {}, pooler)
  await rejectsWith(deaf.listen(ch), 'ACCORD_CONNECTION', /listen_url/)
  // Commands through the pooler, LISTEN straight to the server.
  const listener = await h.client('listener', { listenUrl: h.url }, pooler)
  const sender = await h.client('sender', {}, pooler)
  const sub = await listener.listen(ch)
  await sender.notify(ch, 'through the pooler')
  assert.deepEqual(await nextMessage(sub), { type: 'message', channel: ch, payload: 'through the pooler' })
  await sub.close()
})

test('listenUrl is refused on the embedded store', async () => {
  await rejectsWith(
    accord.connect('memory:node-listen-url', { listenUrl: 'postgres://localhost/x' }),
    'ACCORD_INVALID_ARGUMENT',
    /listen_url/,
  )
})
