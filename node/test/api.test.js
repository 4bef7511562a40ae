'use strict'
// The shape of the API: bad arguments get clear errors with codes, errors are Errors, the
// classes cannot be built by hand, and the ESM entry exports what the CommonJS one does.

const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { test } = require('node:test')
const { pathToFileURL } = require('node:url')
const { accord, databaseUrl, PACKAGE_DIR, rejectsWith, scenario } = require('./support')

// The core's error kinds (ErrorKind::ALL), as the addon exports their codes.
const CODES = accord.ERROR_CODES

test('ERROR_CODES lists every kind of the core once, frozen, and each is documented', () => {
  assert.ok(Array.isArray(CODES))
  assert.ok(Object.isFrozen(CODES))
  assert.equal(new Set(CODES).size, CODES.length)
  assert.ok(CODES.length >= 11)
  for (const code of CODES) assert.match(code, /^ACCORD_[A-Z_]+$/)
  const typings = fs.readFileSync(path.join(PACKAGE_DIR, 'index.d.ts'), 'utf8')
  const readme = fs.readFileSync(path.join(PACKAGE_DIR, 'README.md'), 'utf8')
  for (const code of CODES) {
    assert.ok(typings.includes(code), `index.d.ts documents ${code}`)
    assert.ok(readme.includes(code), `README.md documents ${code}`)
  }
  assert.throws(() => CODES.push('ACCORD_MORE'), TypeError)
})

scenario('every error kind but ACCORD_INTERNAL can be provoked from JavaScript', async (h) => {
  const o1 = await h.client('o1')
  const o2 = await h.client('o2')
  const held = await o1.acquire('held', { ttl: 60000 })
  const finished = await o1.acquire('done', { ttl: 60000 })
  await finished.done()
  const closed = await h.client('closed')
  await closed.close()
  const withClientCert = new URL(h.url)
  withClientCert.searchParams.set('sslkey', '/nonexistent/client.key')
  const provoke = {
    ACCORD_INVALID_ARGUMENT: () => o1.acquire(''),
    ACCORD_HELD: () => o2.reset('held'),
    ACCORD_DONE: () => o2.tryAcquire('done'),
    ACCORD_TIMEOUT: () => o2.acquire('held', { timeout: 100 }),
    ACCORD_CANCELLED: () => o2.acquire('held', { signal: AbortSignal.abort() }),
    ACCORD_LEASE_LOST: () => finished.done(),
    ACCORD_CONNECTION: () =>
      accord.connect('postgres://nobody:wrong@127.0.0.1:1/x', { connectTimeout: 2000 }),
    ACCORD_DATABASE: () =>
      accord.connect(h.url, { schema: `absent_${h.tag}`.slice(0, 63), migrate: false }),
    ACCORD_CLOSED: () => closed.tryAcquire('k'),
    ACCORD_UNSUPPORTED: () => accord.connect(withClientCert.toString()),
    ACCORD_TRIMMED: async () => {
      await o1.publishMany('trimmed', ['a', 'b'])
      await o1.setStreamRetention('trimmed', { maxLen: 1 })
      return o2.subscribe('trimmed', { after: 0 })
    },
  }
  // A bug in accord: nothing a caller does provokes it.
  const unprovokable = ['ACCORD_INTERNAL']
  assert.deepEqual([...Object.keys(provoke), ...unprovokable].sort(), [...CODES].sort())
  for (const [code, call] of Object.entries(provoke)) {
    const e = await rejectsWith(call(), code)
    assert.ok(e instanceof Error, code)
  }
  await held.release()
})

test('connect refuses bad URLs and options with clear errors', async () => {
  const url = databaseUrl()
  const bad = async (args, code, pattern, type = Error) => {
    const e = await rejectsWith(accord.connect(...args), code, pattern)
    assert.ok(e instanceof type, `${e.constructor.name}: ${e.message}`)
    assert.ok(CODES.includes(e.code))
  }
  await bad([], 'ACCORD_INVALID_ARGUMENT', /invalid url: expected a string, got undefined/, TypeError)
  await bad([42], 'ACCORD_INVALID_ARGUMENT', /invalid url: expected a string, got a number/, TypeError)
  await bad(['mysql://x'], 'ACCORD_INVALID_ARGUMENT', /url/)
  await bad(['sqlite:relative.db'], 'ACCORD_INVALID_ARGUMENT', /absolute path/)
  await bad([url, 'ns'], 'ACCORD_INVALID_ARGUMENT', /invalid options: expected an object, got a string/)
  await bad([url, { namespace: '' }], 'ACCORD_INVALID_ARGUMENT', /namespace/)
  await bad([url, { namespace: 7 }], 'ACCORD_INVALID_ARGUMENT', /options\.namespace: expected a string/)
  await bad([url, { ttl: '30s' }], 'ACCORD_INVALID_ARGUMENT', /options\.ttl: expected a number/)
  await bad([url, { ttl: 5 }], 'ACCORD_INVALID_ARGUMENT', /ttl/)
  await bad([url, { ttl: -1 }], 'ACCORD_INVALID_ARGUMENT', /options\.ttl: -1 ms is negative/)
  await bad([url, { ttl: NaN }], 'ACCORD_INVALID_ARGUMENT', /options\.ttl/)
  await bad([url, { poolSize: 0 }], 'ACCORD_INVALID_ARGUMENT', /poolSize/)
  // Ranges are the core's (accord::limits), and so are their messages.
  await bad([url, { poolSize: -1 }], 'ACCORD_INVALID_ARGUMENT', /^invalid poolSize: -1 is outside 1\.\.=64$/)
  await bad([url, { poolSize: 1.5 }], 'ACCORD_INVALID_ARGUMENT', /invalid options\.poolSize: 1\.5 is not an integer/)
  await bad([url, { migrate: 'yes' }], 'ACCORD_INVALID_ARGUMENT', /options\.migrate: expected a boolean/)
  await bad(
    ['postgres://nobody:wrong@127.0.0.1:1/x', { connectTimeout: 2000 }],
    'ACCORD_CONNECTION',
    /127\.0\.0\.1/,
  )
})

scenario('calls refuse bad arguments with ACCORD_INVALID_ARGUMENT, leaving nothing held', async (h) => {
  const c = await h.client('o1')
  const bad = (promise, pattern, type = Error) =>
    rejectsWith(promise, 'ACCORD_INVALID_ARGUMENT', pattern).then((e) =>
      assert.ok(e instanceof type, `${e.constructor.name}: ${e.message}`),
    )
  await bad(c.acquire(''), /invalid key: must not be empty/)
  await bad(c.acquire(), /invalid key: expected a string, got undefined/, TypeError)
  await bad(c.acquire(5), /invalid key: expected a string, got a number/, TypeError)
  await bad(c.acquire({ key: 'a' }), /invalid key: expected a string, got an object/, TypeError)
  await bad(c.acquire('a\0b'), /NUL/)
  await bad(c.acquire('x'.repeat(513)), /513 bytes/)
  await bad(c.tryAcquire(null), /invalid key/, TypeError)
  await bad(c.acquire('a', 1000), /invalid options: expected an object, got a number/, TypeError)
  await bad(c.acquire('a', [1]), /invalid options: expected an object, got an array/)
  await bad(c.acquire('a', { ttl: 50 }), /ttl/)
  await bad(c.acquire('a', { ttl: 25 * 3600 * 1000 }), /ttl/)
  await bad(c.acquire('a', { timeout: '1s' }), /options\.timeout: expected a number/, TypeError)
  await bad(c.acquire('a', { timeout: -5 }), /options\.timeout/)
  await bad(c.acquire('a', { metadata: 'k=v' }), /options\.metadata: expected an object/, TypeError)
  await bad(c.acquire('a', { metadata: [1, 2] }), /options\.metadata/)
  await bad(c.acquire('a', { metadata: { big: 'x'.repeat(70000) } }), /metadata/)
  await bad(c.acquire('a', { metadata: { n: 1n } }), /options\.metadata: the value at key "n" of options\.metadata is a bigint/)
  await bad(c.tryAcquire('a', { metadata: { nul: 'a\0b' } }), /NUL/)
  await bad(c.reset(''), /key/)
  await bad(c.reset(1), /key/, TypeError)
  await bad(c.notify(''), /channel/)
  await bad(c.notify(['jobs']), /invalid channel: expected a string/, TypeError)
  await bad(c.notify('jobs', 42), /invalid payload: expected a string/, TypeError)
  await bad(c.notify('jobs', 'a\0b'), /payload/)
  await bad(c.listen(), /at least one channel/)
  await bad(c.listen('ok', 3), /channel \(argument 2\): expected a string, got a number/, TypeError)
  await bad(c.list('a/'), /invalid query: expected an object/, TypeError)
  await bad(c.list({ prefix: 3 }), /query\.prefix/, TypeError)
  await bad(c.list({ limit: 1001 }), /^invalid limit: 1001 is outside 1\.\.=1000$/)
  await bad(c.list({ state: 'busy' }), /invalid query\.state: "busy" is not one of/)
  const lease = await c.acquire('a', { ttl: 60000, metadata: { ok: true } })
  await bad(lease.renew('x'), /invalid metadata: expected an object/, TypeError)
  await bad(lease.done([]), /invalid metadata/)
  await lease.release()
  assert.equal((await c.list({ state: 'held' })).items.length, 0, 'nothing left held')
  const [info] = (await c.list()).items
  assert.deepEqual(info.metadata, { ok: true })
  // A metadata object is taken the way JSON.stringify sees it.
  const dated = await c.acquire('d', { metadata: { at: new Date(0), skip: undefined, n: 1.5 } })
  assert.deepEqual(dated.metadata, { at: '1970-01-01T00:00:00.000Z', n: 1.5 })
  await dated.release()
})

// A JavaScript string is UTF-16 and may hold an unpaired surrogate, which no Unicode text can.
// Converted lossily it became U+FFFD, so that '\uD800' and '\uD801' locked the same row; the
// binding refuses it, in the core's words (accord::limits::unpaired_surrogate).
scenario('strings holding an unpaired surrogate are refused, naming the field', async (h) => {
  const c = await h.client('o1')
  const bad = (promise, field) =>
    rejectsWith(promise, 'ACCORD_INVALID_ARGUMENT', new RegExp(`^invalid ${field}: holds an unpaired UTF-16 surrogate`))
  const real = await c.acquire('\uFFFD', { ttl: 60000 }) // a real U+FFFD is a key like any other
  for (const key of ['\uD800', '\uD801', 'a\uDC00b', 'x\uD83D', '\uDE00y']) {
    await bad(c.tryAcquire(key), 'key')
    await bad(c.acquire(key, { timeout: 100 }), 'key')
  }
  const pair = await c.tryAcquire('\uD83D\uDE00') // a valid pair: 😀
  assert.equal(pair.key, '😀')
  await bad(c.notify('ch\uD800', 'x'), 'channel')
  await bad(c.listen('ok', 'ch\uDBFF'), 'channel \\(argument 2\\)')
  await bad(c.notify(h.channel('ok'), 'p\uD800'), 'payload')
  await bad(c.offer('p/', ['p/\uD800']), 'keys\\[0\\]')
  await bad(real.renew({ note: 'n\uD800' }), 'metadata')
  await bad(real.renew({ ['k\uDC00']: 1 }), 'metadata')
  await bad(accord.connect(h.url, { namespace: 'ns\uDFFF' }), 'options\\.namespace')
  await real.release()
  await pair.release()
  assert.equal((await c.list({ state: 'held' })).items.length, 0, 'nothing left held')
})

// Issue 32: errors read in Node's words, milliseconds and camelCase (the core renders them in
// the style the addon declares), and a number that is no integer is judged as one: NaN said
// "NaN is not a number of milliseconds" for a semaphore's limit, 2 ** 53 "is not an integer",
// the fields were `handoff_timeout`, `max_age`, `page_size`, the period "0ns".
scenario('errors read in milliseconds and camelCase; numbers that are no integers are named so', async (h) => {
  const c = await h.client('o1')
  const bad = (promise, pattern) => rejectsWith(promise, 'ACCORD_INVALID_ARGUMENT', pattern)
  await bad(c.fleet('f', { shards: 2, ttl: 5000, period: 0 }), /^invalid period: 0 ms is outside 10 ms\.\.=ttl \(5000 ms\)$/)
  await bad(c.fleet('f', { shards: 2, handoffTimeout: 0 }), /^invalid handoffTimeout: 0 ms is outside \(0 ms, 86400000 ms\]$/)
  await bad(c.fleet('f', { shards: 2, maxHandoffsPerPeriod: 0 }), /^invalid maxHandoffsPerPeriod: 0 is outside 1\.\.=1000$/)
  await bad(c.fleet('f', { shards: 2, period: NaN }), /^invalid options\.period: NaN is not a duration$/)
  await bad(c.setStreamRetention('s', { maxAge: 50 }), /^invalid maxAge: 50 ms is shorter than the least, 100 ms$/)
  await bad(c.subscribe('s', { pageSize: 0 }), /^invalid pageSize: 0 is outside 1\.\.=1000$/)
  await bad(c.semaphore('s', NaN), /^invalid limit: NaN is not an integer$/)
  await bad(c.semaphore('s', Infinity), /^invalid limit: Infinity is not an integer$/)
  await bad(c.semaphore('s', 2 ** 53), /^invalid limit: 9007199254740992 is beyond the integers a number holds exactly/)
  await bad(c.semaphore('s', -1), /^invalid limit: -1 is outside 1\.\.=10000$/)
  await bad(c.claim('p/', { limit: -Infinity }), /^invalid options\.limit: -Infinity is not an integer$/)
  await bad(c.list({ limit: 2 ** 60 }), /^invalid query\.limit: 1152921504606846976 is beyond/)
  await bad(c.subscribe('s', { pageSize: 0.5 }), /^invalid options\.pageSize: 0\.5 is not an integer$/)
  // A timeout says how long it waited, without float noise (not "200.804233ms").
  await c.acquire('k', { ttl: 60000 })
  const other = await h.client('o2')
  const e = await rejectsWith(other.acquire('k', { timeout: 200 }), 'ACCORD_TIMEOUT', /^timed out after [\d.]+ ms waiting to acquire "k"$/)
  const waited = e.message.match(/after ([\d.]+) ms/)[1]
  assert.ok(waited.replace('.', '').length <= 4, e.message)
})

// Metadata is JSON: what JSON.stringify would change silently (NaN → null, a Map → {}) is
// refused, naming where it is, as Python refuses it (accord::limits::not_json).
scenario('metadata that JSON cannot hold is refused, not changed', async (h) => {
  const c = await h.client('o1')
  class Point {
    constructor() {
      this.x = 1
    }
  }
  const cases = [
    [{ rows: NaN }, /the value at key "rows" of options\.metadata is NaN, which JSON cannot hold/],
    [{ rows: Infinity }, /key "rows" of options\.metadata is Infinity/],
    [{ a: { b: [1, -Infinity] } }, /the value at index 1 of options\.metadata is -Infinity/],
    [{ m: new Map([['k', 1]]) }, /key "m" of options\.metadata is a Map, which JSON cannot hold/],
    [{ s: new Set([1]) }, /key "s" of options\.metadata is a Set/],
    [{ p: new Point() }, /key "p" of options\.metadata is an instance of Point/],
    [{ f: () => 1 }, /key "f" of options\.metadata is a function/],
    [{ y: Symbol('y') }, /key "y" of options\.metadata is a symbol/],
    [new Map([['k', 1]]), /^invalid options\.metadata: options\.metadata is a Map/],
  ]
  for (const [metadata, pattern] of cases) {
    await rejectsWith(c.tryAcquire('k', { metadata }), 'ACCORD_INVALID_ARGUMENT', pattern)
  }
  const lease = await c.acquire('k', { ttl: 60000, metadata: { rows: 1 } })
  await rejectsWith(lease.done({ rows: NaN }), 'ACCORD_INVALID_ARGUMENT', /^invalid metadata: the value at key "rows" of metadata is NaN/)
  await rejectsWith(lease.renew(new Map()), 'ACCORD_INVALID_ARGUMENT', /^invalid metadata: metadata is a Map/)
  // What JSON holds goes through: a Date by its toJSON, a null-prototype object, null.
  const plain = Object.assign(Object.create(null), { n: 2 })
  await lease.renew({ at: new Date(0), plain, none: null, rows: 2 })
  const [info] = (await c.list({ prefix: 'k' })).items
  assert.deepEqual(info.metadata, { at: '1970-01-01T00:00:00.000Z', plain: { n: 2 }, none: null, rows: 2 })
  await lease.release()
})

/** The fields of `interface name` in index.d.ts (for `Omit<…, 'shared'>`, minus `shared`). */
function interfaceFields(typings, name, omit = []) {
  const body = typings.match(new RegExp(`export interface ${name} \\{\\n([\\s\\S]*?)\\n\\}`))
  assert.ok(body, `index.d.ts declares ${name}`)
  const fields = [...body[1].matchAll(/^  (\w+)\??:/gm)].map((m) => m[1])
  return fields.filter((f) => !omit.includes(f))
}

// A misspelt option was ignored silently (`namepsace`: every key in "default"). Every options
// object refuses a property it does not know, naming it, and the known ones it lists are the
// interface's fields in index.d.ts.
scenario('unknown options are refused, naming them', async (h) => {
  const typings = fs.readFileSync(path.join(PACKAGE_DIR, 'index.d.ts'), 'utf8')
  const c = await h.client('o1')
  const semaphore = await c.semaphore(`sem_${h.tag}`, 2)
  const calls = [
    ['ClientOptions', [], (o) => accord.connect(h.url, o)],
    ['AcquireOptions', [], (o) => c.acquire('k', o)],
    ['TryAcquireOptions', [], (o) => c.tryAcquire('k', o)],
    ['ClaimOptions', [], (o) => c.claim('p/', o)],
    ['JoinOptions', [], (o) => c.join('g', o)],
    ['FleetOptions', [], (o) => c.fleet('f', { shards: 4, ...o })],
    ['ListQuery', [], (o) => c.list(o)],
    ['SubscribeOptions', [], (o) => c.subscribe('s', o)],
    ['StreamRetention', [], (o) => c.setStreamRetention('s', { maxLen: 5, ...o })],
    ['CampaignOptions', [], (o) => c.election('e').campaign('v', o)],
    ['AcquireOptions', ['shared'], (o) => semaphore.acquire(o)],
    ['TryAcquireOptions', ['shared'], (o) => semaphore.tryAcquire(o)],
  ]
  for (const [name, omit, call] of calls) {
    const e = await rejectsWith(call({ bogus: 1 }), 'ACCORD_INVALID_ARGUMENT', /unknown option "bogus" \(known: /)
    assert.ok(e instanceof TypeError, `${name}: ${e.constructor.name}`)
    const known = e.message.match(/\(known: (.*)\)$/)[1].split(', ')
    assert.deepEqual(known, interfaceFields(typings, name, omit), name)
  }
  await rejectsWith(
    accord.connect(h.url, { namepsace: 'reports' }),
    'ACCORD_INVALID_ARGUMENT',
    /^invalid options: unknown option "namepsace"; did you mean "namespace"\?/,
  )
  await rejectsWith(c.acquire('k', { timout: 5 }), 'ACCORD_INVALID_ARGUMENT', /did you mean "timeout"/)
  // A permit is exclusive: `shared` is not an option of a semaphore.
  await rejectsWith(semaphore.acquire({ shared: true }), 'ACCORD_INVALID_ARGUMENT', /unknown option "shared"/)
  assert.equal((await c.list({ state: 'held' })).items.length, 0, 'nothing left held')
})

test('errors are Error objects with the code of their kind (docs/semantics.md)', async () => {
  const e = await rejectsWith(accord.connect('sqlite:relative.db'), 'ACCORD_INVALID_ARGUMENT')
  assert.ok(e instanceof Error)
  assert.equal(typeof e.message, 'string')
  assert.ok(e.stack)
})

test('the classes come only from connect/acquire/listen', () => {
  for (const Class of [accord.Client, accord.Lease, accord.Subscription, accord.StreamSubscription]) {
    assert.equal(typeof Class, 'function')
    assert.throws(() => new Class())
  }
})

test('migrationSql prints the schema for DBAs', () => {
  const sql = accord.migrationSql('accord_dba')
  assert.match(sql, /CREATE SCHEMA IF NOT EXISTS "accord_dba"/)
  assert.match(accord.migrationSql(), /"accord"/)
  assert.throws(() => accord.migrationSql(''), { code: 'ACCORD_INVALID_ARGUMENT' })
})

test('the ESM entry exports the same API as the CommonJS one', async () => {
  const esm = await import(pathToFileURL(path.join(PACKAGE_DIR, 'index.mjs')))
  const names = Object.keys(accord).filter((n) => !n.startsWith('__'))
  for (const name of names) assert.equal(esm[name], accord[name], name)
  assert.deepEqual(Object.keys(esm).filter((n) => n !== 'default').sort(), names.sort())
  assert.equal(esm.default, accord)
})
