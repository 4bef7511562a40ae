'use strict'
// Durable streams (D1–D5, as core/tests/conformance/streams.rs) through the Node API, on
// PostgreSQL and the embedded stores: seqs in commit order, replay from the earliest then live events, latest,
// named consumers resuming after their ack, retention and ACCORD_TRIMMED, payloads of any
// string up to 64 KiB, bad input refused naming the field, and what ends a waiting next().

const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')
const { accord, assertClose, handled, rejectsWith, scenario, SEC, sleep, within } = require('./support')

const BOUND = 10 * SEC

/** The next event of a stream subscription, within a bound. */
async function nextEvent(sub) {
  const step = await within(BOUND, sub.next(), 'waiting for a stream event')
  assert.equal(step.done, false, 'the subscription ended')
  return step.value
}

/** Asserts that nothing is delivered for a short while; returns the next() still pending. */
async function nothingFor(sub, ms) {
  const pending = handled(sub.next())
  const first = await Promise.race([pending, sleep(ms).then(() => 'nothing')])
  assert.equal(first, 'nothing', 'an event was delivered')
  return { pending }
}

scenario('D1 earliest replays 1..N in order then live events; latest skips the stored ones', async (h) => {
  const publisher = await h.client('o1')
  const reader = await h.client('o2')
  assert.deepEqual(await reader.streamInfo('jobs'), {
    stream: 'jobs',
    firstSeq: 1n,
    lastSeq: 0n,
    maxLen: null,
    maxAge: null,
  })
  const seqs = await publisher.publishMany('jobs', ['e1', 'e2', 'e3'])
  assert.deepEqual(seqs, [1n, 2n, 3n])
  assert.equal(await publisher.publish('jobs', 'e4'), 4n)
  assert.deepEqual(await publisher.publishMany('jobs', []), [])
  const info = await reader.streamInfo('jobs')
  assert.deepEqual([info.firstSeq, info.lastSeq], [1n, 4n])

  const before = await h.now()
  const sub = await reader.subscribe('jobs', { after: 'earliest', pageSize: 2 })
  assert.ok(sub instanceof accord.StreamSubscription)
  assert.equal(sub.stream, 'jobs')
  assert.equal(sub.consumer, null)
  assert.equal(sub.position, 0n)
  assert.equal(sub.closed, false)
  for (let i = 1; i <= 4; i++) {
    const event = await nextEvent(sub)
    assert.deepEqual([event.stream, event.seq, event.payload], ['jobs', BigInt(i), `e${i}`])
    assert.ok(event.publishedAt instanceof Date)
    assertClose(event.publishedAt, before)
    assert.equal(sub.position, BigInt(i))
  }
  // Live: a publish after the replay.
  const latest = await reader.subscribe('jobs', { after: 'latest' })
  const byDefault = await reader.subscribe('jobs')
  assert.equal(latest.position, 4n)
  const live = handled(sub.next())
  assert.equal(await publisher.publish('jobs', 'live'), 5n)
  const { value } = await within(BOUND, live)
  assert.deepEqual([value.seq, value.payload], [5n, 'live'])
  for (const s of [latest, byDefault]) {
    const event = await nextEvent(s)
    assert.deepEqual([event.seq, event.payload], [5n, 'live'], 'latest delivers only what comes after it')
  }

  // Concurrent publishes of one client get distinct seqs, each once.
  const many = await Promise.all(Array.from({ length: 20 }, (_, i) => publisher.publish('jobs', `c${i}`)))
  assert.deepEqual([...many].sort((a, b) => (a < b ? -1 : 1)), Array.from({ length: 20 }, (_, i) => BigInt(6 + i)))
  // Delivered in seq order: the payload of each seq is what its publish sent.
  let n = 0
  for await (const event of sub) {
    assert.equal(event.seq, BigInt(6 + n))
    assert.equal(event.payload, `c${many.indexOf(event.seq)}`)
    if (++n === 20) break
  }
  assert.equal(sub.closed, true, 'leaving the loop closes the subscription')
  assert.deepEqual(await sub.next(), { done: true, value: undefined })
  await latest.close()
  await byDefault[Symbol.asyncDispose]()
  assert.equal(byDefault.closed, true)
})

scenario('D2 terminated connections lose nothing: reading resumes after the last seq', async (h) => {
  const publisher = await h.client('o1')
  const reader = await h.client('o2')
  const sub = await reader.subscribe('d2', { after: 'earliest' })
  await publisher.publish('d2', 'before')
  assert.equal((await nextEvent(sub)).seq, 1n)
  assert.ok((await h.terminate('o2')) >= 1)
  await publisher.publishMany('d2', ['a', 'b'])
  const [a, b] = [await nextEvent(sub), await nextEvent(sub)]
  assert.deepEqual([a.seq, a.payload, b.seq, b.payload], [2n, 'a', 3n, 'b'])
  await sub.close()
})

scenario('D3 a named consumer resumes after its ack; a seq seeks', async (h) => {
  const publisher = await h.client('o1')
  const reader = await h.client('o2')
  await publisher.publishMany('orders', ['o1', 'o2', 'o3', 'o4', 'o5'])
  const first = await reader.subscribe('orders', { after: 'earliest', consumer: 'billing' })
  assert.equal(first.consumer, 'billing')
  for (let i = 1; i <= 3; i++) assert.equal((await nextEvent(first)).seq, BigInt(i))
  await first.ack(3n)
  await first.ack(2) // older: changes nothing; a number is taken as well as a bigint
  await rejectsWith(first.ack(4n), 'ACCORD_INVALID_ARGUMENT', /^invalid seq: 4 was not delivered/)
  await rejectsWith(first.ack(0n), 'ACCORD_INVALID_ARGUMENT', /invalid seq/)
  await first.close()

  // Another client of the consumer resumes after the ack: the stored position wins over
  // 'earliest', which applies only to a consumer without one.
  const other = await h.client('o3')
  const resumed = await other.subscribe('orders', { after: 'earliest', consumer: 'billing' })
  assert.equal(resumed.position, 3n)
  assert.equal((await nextEvent(resumed)).payload, 'o4')
  await resumed.close()
  const again = await other.subscribe('orders', { consumer: 'billing' })
  assert.equal((await nextEvent(again)).seq, 4n, 'nothing was acked since')
  await again.close()
  // A seq always applies (a seek).
  const seek = await other.subscribe('orders', { after: 1n, consumer: 'billing' })
  assert.equal((await nextEvent(seek)).seq, 2n)
  await seek.close()

  // Without a consumer there is nothing to ack.
  const anonymous = await reader.subscribe('orders', { after: 0 })
  assert.equal((await nextEvent(anonymous)).seq, 1n)
  await rejectsWith(anonymous.ack(1n), 'ACCORD_INVALID_ARGUMENT', /^invalid consumer: ack needs a named consumer/)
  await anonymous.close()
})

scenario('D4 retention trims the oldest events; a start among them is ACCORD_TRIMMED', async (h) => {
  const c = await h.client('o1')
  const seqs = await c.publishMany('log', Array.from({ length: 10 }, (_, i) => `l${i + 1}`))
  assert.equal(seqs.at(-1), 10n)
  // A reader that read one event of a page of one, then lost the rest to retention.
  const slow = await c.subscribe('log', { after: 'earliest', pageSize: 1 })
  assert.equal((await nextEvent(slow)).seq, 1n)

  assert.equal(await c.setStreamRetention('log', { maxLen: 3 }), 7)
  assert.deepEqual(await c.streamInfo('log'), {
    stream: 'log',
    firstSeq: 8n,
    lastSeq: 10n,
    maxLen: 3,
    maxAge: null,
  })
  await rejectsWith(slow.next(), 'ACCORD_TRIMMED', /stream "log": the events after seq 1 were trimmed .* starts at seq 8/)
  assert.deepEqual(await slow.next(), { done: true, value: undefined }, 'it ends after ACCORD_TRIMMED')
  await slow.close()

  await rejectsWith(c.subscribe('log', { after: 2n }), 'ACCORD_TRIMMED', /starts at seq 8/)
  await rejectsWith(c.subscribe('log', { after: 0 }), 'ACCORD_TRIMMED', /starts at seq 8/)
  const earliest = await c.subscribe('log', { after: 'earliest' })
  assert.equal((await nextEvent(earliest)).seq, 8n, 'earliest starts where the stream starts now')
  await earliest.close()
  const edge = await c.subscribe('log', { after: 7n })
  assert.equal((await nextEvent(edge)).seq, 8n)
  await edge.close()

  // Both bounds, read back; `{}` keeps every event again.
  assert.equal(await c.setStreamRetention('log', { maxLen: 100, maxAge: 60 * SEC }), 0)
  const info = await c.streamInfo('log')
  assert.deepEqual([info.maxLen, info.maxAge], [100, 60 * SEC])
  assert.equal(await c.setStreamRetention('log', {}), 0)
  const cleared = await c.streamInfo('log')
  assert.deepEqual([cleared.maxLen, cleared.maxAge], [null, null])
})

scenario('D5 any string up to 64 KiB of UTF-8 round-trips, NUL included', async (h) => {
  const c = await h.client('o1')
  const sub = await c.subscribe('payloads')
  const head = 'a\0b🦀é中'
  const full = head + 'x'.repeat(65536 - Buffer.byteLength(head))
  assert.equal(Buffer.byteLength(full), 65536)
  const odd = ['', 'nul\u0000byte', 'quote\'"\\$accord$', '\u0000']
  await c.publish('payloads', full)
  await c.publishMany('payloads', odd)
  assert.equal((await nextEvent(sub)).payload, full)
  for (const payload of odd) assert.equal((await nextEvent(sub)).payload, payload)
  await rejectsWith(c.publish('payloads', `${full}x`), 'ACCORD_INVALID_ARGUMENT', /^invalid payload: is 65537 bytes long, the limit is 65536$/)
  await rejectsWith(c.publishMany('payloads', ['ok', `${full}x`]), 'ACCORD_INVALID_ARGUMENT', /invalid payload/)
  assert.equal((await c.streamInfo('payloads')).lastSeq, 5n, 'a refused batch stores nothing')
  await sub.close()
})

scenario('streams refuse bad arguments with ACCORD_INVALID_ARGUMENT naming the field', async (h) => {
  const c = await h.client('o1')
  const bad = (promise, pattern, type = Error) =>
    rejectsWith(promise, 'ACCORD_INVALID_ARGUMENT', pattern).then((e) =>
      assert.ok(e instanceof type, `${e.constructor.name}: ${e.message}`),
    )
  await bad(c.publish('', 'x'), /^invalid stream: must not be empty/)
  await bad(c.publish('s\0', 'x'), /invalid stream: .*NUL/)
  await bad(c.publish('s'.repeat(513), 'x'), /invalid stream: .*513 bytes/)
  await bad(c.publish(5, 'x'), /^invalid stream: expected a string, got a number$/, TypeError)
  await bad(c.publish('s'), /^invalid payload: expected a string, got undefined$/, TypeError)
  await bad(c.publishMany('s', 'x'), /^invalid payloads: expected an array of strings/, TypeError)
  await bad(c.publishMany('s', ['a', 3]), /^invalid payloads\[1\]: expected a string/, TypeError)
  await bad(c.publishMany('s', Array(10001).fill('')), /^invalid payloads: holds 10001 events, the limit is 10000/)
  await bad(c.subscribe(''), /^invalid stream/)
  await bad(c.subscribe('s', 'earliest'), /^invalid options: expected an object/, TypeError)
  await bad(c.subscribe('s', { pageSize: 0 }), /^invalid pageSize: 0 is outside 1\.\.=1000$/)
  await bad(c.subscribe('s', { pageSize: 1001 }), /^invalid pageSize: 1001 is outside 1\.\.=1000$/)
  await bad(c.subscribe('s', { pageSize: '10' }), /^invalid options\.pageSize: expected a number/, TypeError)
  await bad(c.subscribe('s', { consumer: '' }), /^invalid consumer: must not be empty/)
  await bad(c.subscribe('s', { consumer: 7 }), /^invalid options\.consumer: expected a string/, TypeError)
  await bad(c.subscribe('s', { after: 'newest' }), /^invalid options\.after: "newest" is not "earliest", "latest" or a seq$/)
  await bad(c.subscribe('s', { after: -1 }), /^invalid options\.after: -1 is negative$/)
  await bad(c.subscribe('s', { after: -1n }), /^invalid options\.after: -1 is negative$/)
  await bad(c.subscribe('s', { after: 1.5 }), /^invalid options\.after: 1\.5 is not an integer$/)
  await bad(c.subscribe('s', { after: 2n ** 64n }), /^invalid options\.after: the bigint is outside/)
  await bad(c.subscribe('s', { after: {} }), /^invalid options\.after: expected 'latest', 'earliest', a bigint or a number, got an object$/, TypeError)
  await bad(c.streamInfo(''), /^invalid stream/)
  await bad(c.setStreamRetention('s'), /^invalid retention: expected an object, got undefined$/, TypeError)
  await bad(c.setStreamRetention('s', { maxLen: 0 }), /^invalid maxLen: 0 is outside/)
  await bad(c.setStreamRetention('s', { maxLen: -1 }), /^invalid maxLen: -1 is outside 1\.\.=/)
  await bad(c.setStreamRetention('s', { maxLen: '5' }), /^invalid retention\.maxLen: expected a number/, TypeError)
  await bad(c.setStreamRetention('s', { maxAge: 50 }), /^invalid maxAge: 50 ms is shorter than the least, 100 ms$/)
  await bad(c.setStreamRetention('s', { maxAge: -1 }), /^invalid retention\.maxAge: -1 ms is negative$/)
  const sub = await c.subscribe('s', { consumer: 'x' })
  await bad(sub.ack('1'), /^invalid seq: expected a bigint or a number, got a string$/, TypeError)
  await bad(sub.ack(1n), /^invalid seq: 1 was not delivered/)
  await sub.close()
  assert.equal((await c.streamInfo('s')).lastSeq, 0n, 'nothing was published')
})

scenario('close, an AbortSignal and closing the client end a waiting next()', async (h) => {
  const c = await h.client('o1')
  const sub = await c.subscribe('quiet')
  const { pending } = await nothingFor(sub, 200)
  await sub.close()
  assert.deepEqual(await within(BOUND, pending), { done: true, value: undefined })
  assert.equal(sub.closed, true)
  await sub.close() // again: harmless

  const stop = new AbortController()
  const aborted = await c.subscribe('quiet', { signal: stop.signal })
  const waiting = handled(aborted.next())
  stop.abort()
  assert.deepEqual(await within(BOUND, waiting), { done: true, value: undefined })
  assert.equal(aborted.closed, true)
  await rejectsWith(c.subscribe('quiet', { signal: stop.signal }), 'ACCORD_CANCELLED')
  await rejectsWith(c.subscribe('quiet', { signal: 'stop' }), 'ACCORD_INVALID_ARGUMENT', /options\.signal/)

  const open = await c.subscribe('quiet', { signal: new AbortController().signal })
  const left = handled(open.next())
  await c.close()
  await rejectsWith(within(BOUND, left), 'ACCORD_CLOSED')
  await rejectsWith(c.publish('quiet', 'late'), 'ACCORD_CLOSED')
})

for (const store of ['sqlite', 'memory']) {
  test(`streams on the ${store} store: replay, live, resume after an ack, trimming`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'accord-node-streams-'))
    const url = store === 'sqlite' ? `sqlite://${path.join(dir, 'accord.db')}` : `memory:node-streams-${process.pid}`
    const a = await accord.connect(url)
    const b = await accord.connect(url)
    try {
      assert.deepEqual(await a.publishMany('s', ['one', 'two\0']), [1n, 2n])
      const sub = await b.subscribe('s', { after: 'earliest', consumer: 'c' })
      assert.equal((await nextEvent(sub)).payload, 'one')
      assert.equal((await nextEvent(sub)).payload, 'two\0')
      const live = handled(sub.next())
      assert.equal(await a.publish('s', 'three'), 3n)
      assert.equal((await within(BOUND, live)).value.seq, 3n)
      await sub.ack(2n)
      await sub.close()
      const resumed = await a.subscribe('s', { consumer: 'c' })
      assert.equal((await nextEvent(resumed)).seq, 3n)
      await resumed.close()
      assert.equal(await a.setStreamRetention('s', { maxLen: 1 }), 2)
      await rejectsWith(b.subscribe('s', { after: 0 }), 'ACCORD_TRIMMED', /starts at seq 3/)
    } finally {
      await a.close()
      await b.close()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
}
