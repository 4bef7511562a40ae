'use strict'
// The notify/listen scenarios N1–N6 (docs/semantics.md) through the Node API.

const assert = require('node:assert/strict')
const { eventually, handled, nextMessage, rejectsWith, scenario, SEC, sleep, within } = require('./support')

scenario('N1 a listener hears accord, plain SQL and a trigger', async (h) => {
  const jobs = h.channel('jobs')
  const listener = await h.client('o1')
  const sender = await h.client('o2')
  const sub = await listener.listen(jobs)
  assert.deepEqual(sub.channels, [jobs])
  await sender.notify(jobs, 'p1')
  assert.deepEqual(await nextMessage(sub), { type: 'message', channel: jobs, payload: 'p1' })
  await h.admin.query("SELECT pg_notify($1, 'p2')", [jobs])
  assert.deepEqual(await nextMessage(sub), { type: 'message', channel: jobs, payload: 'p2' })
  const table = `"n1_${h.tag}"`
  await h.admin.query(`
    CREATE TABLE ${table} (v text);
    CREATE FUNCTION ${table}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_notify('${jobs}', NEW.v); RETURN NEW; END $$;
    CREATE TRIGGER announce AFTER INSERT ON ${table} FOR EACH ROW EXECUTE FUNCTION ${table}();
    INSERT INTO ${table} VALUES ('p3');
    DROP TABLE ${table}; DROP FUNCTION ${table}();`)
  assert.deepEqual(await nextMessage(sub), { type: 'message', channel: jobs, payload: 'p3' })
  await sender.notify(jobs)
  assert.equal((await nextMessage(sub)).payload, '', 'an omitted payload is empty')
  await sub.close()
})

scenario('N2 nothing sent after listen resolves is missed; one listen, several channels', async (h) => {
  const listener = await h.client('o1')
  const sender = await h.client('o2')
  for (let round = 0; round < 20; round++) {
    const [a, b] = [h.channel(`a${round}`), h.channel(`b${round}`)]
    const sub = await listener.listen(a, b)
    await sender.notify(b, 'first')
    await sender.notify(a, 'second')
    assert.deepEqual(await nextMessage(sub), { type: 'message', channel: b, payload: 'first' })
    assert.deepEqual(await nextMessage(sub), { type: 'message', channel: a, payload: 'second' })
    await sub.close()
  }
})

scenario('N3 a burst of 10,000 notifications neither stalls nor reorders', async (h) => {
  const burst = h.channel('burst')
  const listener = await h.client('o1')
  const sender = await h.client('o2')
  const sub = await listener.listen(burst)
  // While the burst arrives the client keeps working.
  const lease = await listener.acquire('busy')
  for (let i = 0; i < 10000; i++) await sender.notify(burst, String(i))
  await lease.release()
  let i = 0
  for await (const event of sub) {
    if (event.type !== 'message') continue
    assert.equal(event.payload, String(i))
    if (++i === 10000) break
  }
  assert.equal(sub.closed, true, 'leaving the loop closes the subscription')

  // One transaction delivering 10,000 at once.
  const again = await listener.listen(burst)
  await h.admin.query('SELECT count(pg_notify($1, i::text)) FROM generate_series(0, 9999) i', [
    burst,
  ])
  for (let i = 0; i < 10000; i++) assert.equal((await nextMessage(again)).payload, String(i))
  await again.close()
})

scenario('N4 payload limits and channel names that need quoting', async (h) => {
  const c = await h.client('o1')
  const ch = h.channel('big')
  const sub = await c.listen(ch)
  await rejectsWith(c.notify(ch, 'x'.repeat(8000)), 'ACCORD_INVALID_ARGUMENT', /payload/)
  await c.notify(ch, 'y'.repeat(7999))
  assert.equal((await nextMessage(sub)).payload.length, 7999)
  await sub.close()

  const tail = h.tag.slice(-8)
  const canary = `"canary_${tail}"`
  await h.admin.query(`CREATE TABLE ${canary} (x int)`)
  for (const name of [
    `with "quotes" ${tail}`,
    `spaces and; semicolons ${tail}`,
    `ünïcødé ✓ ${tail}`,
    `x"; DROP TABLE ${canary}; -- ${tail}`,
    `MixedCase${tail}`,
  ]) {
    const sub = await c.listen(name)
    await c.notify(name, 'hi')
    assert.deepEqual(await nextMessage(sub), { type: 'message', channel: name, payload: 'hi' })
    await sub.close()
  }
  await h.admin.query(`DROP TABLE ${canary}`) // the canary survived
  await rejectsWith(c.listen('c'.repeat(64)), 'ACCORD_INVALID_ARGUMENT', /channel/)
})

scenario('N5 a terminated listening connection yields reconnected, then delivery resumes', async (h) => {
  const ch = h.channel('n5')
  const listener = await h.client('o1')
  const sender = await h.client('o2')
  const sub = await listener.listen(ch)
  await sender.notify(ch, 'before')
  assert.equal((await nextMessage(sub)).payload, 'before')
  assert.ok((await h.terminate('o1')) >= 1)
  const step = await within(10 * SEC, sub.next(), 'the reconnected event')
  assert.deepEqual(step, { done: false, value: { type: 'reconnected' } })
  await sender.notify(ch, 'after')
  assert.equal((await nextMessage(sub)).payload, 'after')

  // Closing stops delivery and gives the LISTEN back; another subscription keeps receiving.
  const other = h.channel('n5b')
  const keep = await listener.listen(other)
  const pending = sub.next()
  await sub.close()
  assert.deepEqual(await pending, { done: true, value: undefined })
  assert.equal(sub.closed, true)
  await sender.notify(ch, 'unheard')
  await sender.notify(other, 'heard')
  assert.equal((await nextMessage(keep)).payload, 'heard')
  assert.deepEqual(await sub.next(), { done: true, value: undefined })
  const listening = await listener._listeningChannels()
  assert.ok(listening.includes(other), `${listening}`)
  assert.ok(!listening.includes(ch), `closing did not UNLISTEN: ${listening}`)
  await keep[Symbol.asyncDispose]()
  assert.ok(
    await eventually(5 * SEC, async () => !(await listener._listeningChannels()).includes(other)),
    'disposing UNLISTENs',
  )
})

scenario('N6 closing a client ends waiting acquires and subscriptions with ACCORD_CLOSED', async (h) => {
  const o1 = await h.client('o1')
  const o2 = await h.client('o2')
  const held = await o1.acquire('a')
  const sub = await o2.listen(h.channel('n6'))
  const waiting = handled(o2.acquire('a'))
  const reading = handled(sub.next())
  const iterating = handled(
    (async () => {
      for await (const _ of await o2.listen(h.channel('n6b'))) {
        // nothing is sent
      }
    })(),
  )
  const mine = await o2.acquire('b')
  await sleep(200)
  await within(5 * SEC, o2.close(), 'close')
  assert.equal(o2.closed, true)
  await within(5 * SEC, rejectsWith(waiting, 'ACCORD_CLOSED'), 'the waiting acquire')
  await within(5 * SEC, rejectsWith(reading, 'ACCORD_CLOSED'), 'the pending next()')
  await within(5 * SEC, rejectsWith(iterating, 'ACCORD_CLOSED'), 'the for await loop')
  assert.equal(sub.closed, true)
  // Leases held at close are released, and their holders are told.
  await within(5 * SEC, mine.lost, 'lost of a lease held at close')
  assert.equal(mine.isLost, true)
  assert.ok(await eventually(5 * SEC, async () => (await o1.tryAcquire('b')) !== null))
  await rejectsWith(o2.tryAcquire('c'), 'ACCORD_CLOSED')
  await rejectsWith(o2.notify('x', 'y'), 'ACCORD_CLOSED')
  await rejectsWith(o2.listen('x'), 'ACCORD_CLOSED')
  await o2.close() // idempotent
  await held.release()
})
