'use strict'
// Membership (join, members, watch) and fleets (shards balanced by hand-offs) through the Node
// API, on PostgreSQL; bad input refused naming the field. Lean on purpose: ttls of 2 s, periods
// of 200 ms, 8 shards; conditions are waited for with generous bounds, never slept on.

const assert = require('node:assert/strict')
const { test } = require('node:test')
const { accord, eventually, handled, nextThroughTinyBounds, rejectsWith, scenario, SEC, sleep, within } = require('./support')

const TTL = 2 * SEC
const PERIOD = 200
const FLEET = { shards: 8, ttl: TTL, period: PERIOD }

/** The next watch event, within a bound. */
async function nextEvent(watch) {
  const step = await within(15 * SEC, watch.next(), 'waiting for a watch event')
  assert.equal(step.done, false, 'the watch ended')
  return step.value
}

/**
 * Reads every event of `fleet` as soon as it comes (so hand-offs are acknowledged at once),
 * recording `[tag, event]` in `log`, until the fleet's events end. Resolves with the count.
 */
function pump(fleet, tag, log) {
  return handled(
    (async () => {
      let n = 0
      for await (const event of fleet) {
        log.push([tag, event])
        n += 1
      }
      return n
    })(),
  )
}

/** Asserts that the fleets' shards are disjoint and cover `0..n-1`. */
function assertSplit(fleets, n) {
  const all = fleets.flatMap((f) => f.shards())
  assert.equal(new Set(all).size, all.length, `a shard held twice: ${all}`)
  assert.deepEqual([...all].sort(), Array.from({ length: n }, (_, i) => String(i)).sort())
}

scenario('join, members and watch: joined, updated, left, in order', async (h) => {
  const a = await h.client('a')
  const b = await h.client('b')
  const w = await h.client('w')
  const ma = await a.join('g', { metadata: { role: 'leader' }, ttl: TTL })
  assert.ok(ma instanceof accord.Member)
  assert.equal(ma.group, 'g')
  assert.equal(ma.owner, 'a')
  assert.equal(ma.key, 'accord.group/g/a')
  assert.equal(typeof ma.fence, 'bigint')
  assert.equal(ma.status, 'held')
  assert.equal(ma.isLost, false)
  assert.equal(ma.lostReason, null)

  const watch = await w.watch('g')
  assert.ok(watch instanceof accord.MemberWatch)
  const first = await nextEvent(watch)
  assert.equal(first.type, 'members')
  assert.deepEqual(
    first.members.map((m) => [m.owner, m.metadata, m.fence]),
    [['a', { role: 'leader' }, ma.fence]],
  )
  assert.ok(first.members[0].since instanceof Date)
  assert.ok(first.members[0].expiresAt instanceof Date)

  const mb = await b.join('g', { ttl: TTL })
  const joined = await nextEvent(watch)
  assert.equal(joined.type, 'joined')
  assert.equal(joined.member.owner, 'b')
  assert.deepEqual(joined.member.metadata, {})
  assert.equal(joined.member.fence, mb.fence)

  // Replaced whole, as members() shows; watchers see 'updated' (the same fence: no rejoin).
  await mb.updateMetadata({ role: 'follower', zone: 2 })
  const updated = await nextEvent(watch)
  assert.deepEqual(
    [updated.type, updated.member.owner, updated.member.fence, updated.member.metadata],
    ['updated', 'b', mb.fence, { role: 'follower', zone: 2 }],
  )
  const members = await w.members('g')
  assert.deepEqual(
    members.map((m) => [m.owner, m.metadata]),
    [
      ['a', { role: 'leader' }],
      ['b', { role: 'follower', zone: 2 }],
    ],
  )
  assert.ok(members[0].since <= members[1].since, 'oldest first')
  assert.deepEqual(await w.members('other'), [])

  await mb.leave()
  const left = await nextEvent(watch)
  assert.equal(left.type, 'left')
  assert.equal(left.member.owner, 'b')
  assert.equal(mb.status, 'released')
  await mb.leave() // again: harmless
  await rejectsWith(mb.updateMetadata({ x: 1 }), 'ACCORD_LEASE_LOST', /group "g"/)
  assert.deepEqual((await a.members('g')).map((m) => m.owner), ['a'])

  // A rejoin is a new member (a new fence); disposing leaves.
  const again = await b.join('g', { ttl: TTL })
  const rejoined = await nextEvent(watch)
  assert.equal(rejoined.type, 'joined')
  assert.ok(rejoined.member.fence > mb.fence)
  await again[Symbol.asyncDispose]()
  assert.equal((await nextEvent(watch)).type, 'left')

  // close() ends a pending next() and every later one with done.
  const pending = watch.next()
  await sleep(50)
  await watch.close()
  assert.deepEqual(await within(10 * SEC, pending, 'the pending next'), { done: true, value: undefined })
  assert.equal(watch.closed, true)
  for await (const event of watch) assert.fail(`an event after close: ${event.type}`)

  // Closing a member's client ends the membership: lost, and others see it leave.
  const watch2 = await w.watch('g')
  assert.equal((await nextEvent(watch2)).type, 'members')
  await a.close()
  assert.equal(ma.status, 'lost')
  assert.equal(ma.lostReason, 'client_closed')
  await within(5 * SEC, ma.lost, 'the member lost')
  const gone = await nextEvent(watch2)
  assert.deepEqual([gone.type, gone.member.owner], ['left', 'a'])
  await watch2.close()

  // Leaving a watch's for-await loop closes it.
  const watch3 = await w.watch('g')
  for await (const event of watch3) {
    assert.deepEqual([event.type, event.members], ['members', []])
    break
  }
  assert.equal(watch3.closed, true)
})

scenario('M2 member watch reads bounded by a timeout or a signal lose no change', async (h) => {
  const a = await h.client('a')
  const w = await h.client('w')
  const watch = await w.watch('m2')
  assert.equal((await nextEvent(watch)).type, 'members')
  await rejectsWith(watch.next({ timeout: 20 }), 'ACCORD_TIMEOUT', /no membership change within 20 ms/)
  for (let round = 0; round < 3; round++) {
    const member = await a.join('m2', { ttl: TTL })
    const joined = await nextThroughTinyBounds(watch, 20 * SEC)
    assert.deepEqual([joined.type, joined.member.owner], ['joined', 'a'])
    await member.leave()
    const left = await nextThroughTinyBounds(watch, 20 * SEC)
    assert.deepEqual([left.type, left.member.owner], ['left', 'a'])
  }
  await watch.close()
})

scenario('two fleet members split 8 shards; close hands everything back', async (h) => {
  const a = await h.client('a')
  const b = await h.client('b')
  const [fa, fb] = await Promise.all([a.fleet('f', FLEET), b.fleet('f', FLEET)])
  assert.ok(fa instanceof accord.Fleet)
  assert.equal(fa.name, 'f')
  assert.equal(fa.closed, false)
  const log = []
  const pumps = [pump(fa, 'a', log), pump(fb, 'b', log)]
  assert.ok(
    await eventually(20 * SEC, () => fa.shards().length === 4 && fb.shards().length === 4),
    `not split 4/4: a ${fa.shards()}, b ${fb.shards()}`,
  )
  assertSplit([fa, fb], 8)
  assert.deepEqual((await fa.members()).map((m) => m.owner).sort(), ['a', 'b'])

  // A fleet's shards() counts a shard as soon as it is granted; its `assigned` event reaches
  // the pump a moment later. Wait until the log has caught up with every shard held.
  const caughtUp = () =>
    [fa, fb].every((fleet) =>
      fleet.shards().every((shard) => log.some(([, e]) => e.type === 'assigned' && e.shard === shard)),
    )
  assert.ok(await eventually(10 * SEC, caughtUp), 'an assigned event never reached the pump')
  const assigned = log.filter(([, e]) => e.type === 'assigned')
  for (const [tag, e] of assigned) {
    assert.ok(e.lease instanceof accord.ShardLease)
    assert.equal(e.lease.shard, e.shard)
    assert.equal(e.lease.key, `accord.fleet/f/s/${e.shard}`)
    assert.equal(typeof e.lease.fence, 'bigint')
    assert.equal(e.lease.isLost, false)
    assert.ok(tag === 'a' || tag === 'b')
  }
  // Every shard held now was assigned to its holder, with the newest fence of that shard.
  for (const [tag, fleet] of [
    ['a', fa],
    ['b', fb],
  ]) {
    for (const shard of fleet.shards()) {
      const last = assigned.filter(([, e]) => e.shard === shard).at(-1)
      assert.equal(last[0], tag, `shard ${shard} last assigned to ${last[0]}, held by ${tag}`)
      assert.equal(last[1].lease.status, 'held')
    }
  }

  // a closes: each of its shards is revoked 'closed', its events end, b takes them all.
  const had = fa.shards()
  const before = log.length
  await fa.close()
  assert.equal(fa.closed, true)
  assert.deepEqual(fa.shards(), [])
  await within(10 * SEC, pumps[0], 'the end of a closed fleet\'s events')
  const revoked = log.slice(before).filter(([tag]) => tag === 'a').map(([, e]) => e)
  assert.deepEqual(
    revoked.map((e) => [e.type, e.reason, e.shard]).sort(),
    had.map((s) => ['revoked', 'closed', s]).sort(),
  )
  for (const e of revoked) assert.equal(typeof e.fence, 'bigint')
  assert.equal(await fa.nextEvent(), null)
  assert.ok(
    await eventually(10 * SEC, () => fb.shards().length === 8),
    `b did not take every shard: ${fb.shards()}`,
  )
  assert.deepEqual((await fb.members()).map((m) => m.owner), ['b'])

  // Disposing closes too; the rest of b's events are its closed revocations.
  await fb[Symbol.asyncDispose]()
  await within(10 * SEC, pumps[1], 'the end of b\'s events')
  const tail = log.filter(([tag]) => tag === 'b').slice(-8).map(([, e]) => [e.type, e.reason])
  assert.deepEqual(tail, Array(8).fill(['revoked', 'closed']))
  const page = await b.list({ prefix: 'accord.fleet/f/', state: 'held' })
  assert.deepEqual(page.items, [], 'nothing of the fleet is held after both closed')
})

scenario('a newcomer gets shards by hand-off, each released only when the holder asks again', async (h) => {
  const a = await h.client('a')
  const b = await h.client('b')
  const fa = await a.fleet('f', { ...FLEET, handoffTimeout: 30 * SEC })
  // Alone, a takes all 8 (read one event at a time: no hand-off is pending yet).
  const held = new Map()
  while (held.size < 8) {
    const e = await within(20 * SEC, fa.nextEvent(), 'a taking the shards')
    assert.equal(e.type, 'assigned')
    held.set(e.shard, e.lease.fence)
  }
  assert.equal(fa.shards().length, 8)

  const fb = await b.fleet('f', { ...FLEET, handoffTimeout: 30 * SEC })
  const log = []
  const pumpB = pump(fb, 'b', log)
  // a is asked for a shard: 'revoked' with reason 'handoff'. Until a asks for its next event,
  // the shard stays a's and b does not get it.
  const revoked = await within(20 * SEC, fa.nextEvent(), 'the hand-off request')
  assert.deepEqual([revoked.type, revoked.reason], ['revoked', 'handoff'])
  assert.equal(revoked.fence, held.get(revoked.shard))
  assert.ok(!fa.shards().includes(revoked.shard))
  await sleep(3 * PERIOD)
  const key = `accord.fleet/f/s/${revoked.shard}`
  const { items } = await b.list({ prefix: key })
  assert.deepEqual(
    items.filter((i) => i.key === key).map((i) => [i.state, i.owner]),
    [['held', 'a']],
    'not released before a asked again',
  )
  assert.ok(!log.some(([, e]) => e.shard === revoked.shard), 'b got it before a acknowledged')

  // Asking again acknowledges: the shard is released and b is woken with it.
  const next = handled(fa.nextEvent())
  assert.ok(
    await eventually(10 * SEC, () => log.some(([, e]) => e.type === 'assigned' && e.shard === revoked.shard)),
    `b never got shard ${revoked.shard}`,
  )
  const got = log.find(([, e]) => e.shard === revoked.shard)[1]
  assert.ok(got.lease.fence > revoked.fence, 'a new grant, a larger fence')

  // Keep acknowledging a's hand-offs until the fleet is balanced 4/4.
  const logA = [['a', await next]]
  const pumpA = pump(fa, 'a', logA)
  assert.ok(
    await eventually(20 * SEC, () => fa.shards().length === 4 && fb.shards().length === 4),
    `not split 4/4: a ${fa.shards()}, b ${fb.shards()}`,
  )
  assertSplit([fa, fb], 8)
  for (const [, e] of logA) {
    if (e.type === 'revoked') assert.equal(e.reason, 'handoff')
  }
  await Promise.all([fa.close(), fb.close()])
  await within(10 * SEC, Promise.all([pumpA, pumpB]), 'the end of the events')
})

scenario('membership and fleet calls refuse bad arguments naming the field', async (h) => {
  const c = await h.client('c')
  const bad = (promise, pattern, type = Error) =>
    rejectsWith(promise, 'ACCORD_INVALID_ARGUMENT', pattern).then((e) =>
      assert.ok(e instanceof type, `${e.constructor.name}: ${e.message}`),
    )
  await bad(c.join(''), /^invalid group: must not be empty/)
  await bad(c.join(42), /^invalid group: expected a string, got a number/, TypeError)
  await bad(c.join('g', 'x'), /^invalid options: expected an object, got a string/, TypeError)
  await bad(c.join('g', { ttl: 5 }), /^invalid options\.ttl: 5 ms is outside/)
  await bad(c.join('g', { ttl: '2s' }), /^invalid options\.ttl: expected a number/, TypeError)
  await bad(c.join('g', { metadata: [] }), /^invalid options\.metadata: expected an object, got an array/)
  await bad(c.members(''), /^invalid group/)
  await bad(c.members(), /^invalid group: expected a string, got undefined/, TypeError)
  await bad(c.watch(7), /^invalid group: expected a string/, TypeError)

  const member = await c.join('g', { ttl: TTL })
  await bad(member.updateMetadata(), /^invalid metadata: expected an object, got undefined/, TypeError)
  await bad(member.updateMetadata('x'), /^invalid metadata: expected an object, got a string/, TypeError)
  await member.leave()

  await bad(c.fleet(), /^invalid name: expected a string, got undefined/, TypeError)
  await bad(c.fleet('f'), /^invalid options: expected an object, got undefined/, TypeError)
  await bad(c.fleet('f', {}), /^invalid options\.shards: the shards are required/)
  await bad(c.fleet('f', { shards: 4, keys: ['a'] }), /^invalid options: give options\.shards or options\.keys, not both/)
  await bad(c.fleet('', { shards: 2 }), /^invalid name/)
  await bad(c.fleet('f', { shards: 0 }), /^invalid shards: 0 is outside 1\.\.=10000$/)
  await bad(c.fleet('f', { shards: -1 }), /^invalid shards: -1 is outside 1\.\.=10000$/)
  await bad(c.fleet('f', { shards: 10001 }), /^invalid shards: 10001 is outside 1\.\.=10000$/)
  await bad(c.fleet('f', { shards: 1.5 }), /^invalid options\.shards: 1\.5 is not an integer/)
  await bad(c.fleet('f', { shards: '8' }), /^invalid options\.shards: expected a number/, TypeError)
  await bad(c.fleet('f', { keys: [] }), /^invalid keys/)
  await bad(c.fleet('f', { keys: ['a', 'a'] }), /^invalid keys: "a" appears twice/)
  await bad(c.fleet('f', { keys: ['a', 3] }), /^invalid options\.keys\[1\]: expected a string/, TypeError)
  await bad(c.fleet('f', { keys: 'a' }), /^invalid options\.keys: expected an array of strings/, TypeError)
  await bad(c.fleet('f', { shards: 2, ttl: 5 }), /^invalid options\.ttl: 5 ms is outside/)
  await bad(c.fleet('f', { shards: 2, ttl: TTL, period: 5 }), /^invalid period/)
  await bad(c.fleet('f', { shards: 2, ttl: TTL, period: 3 * SEC }), /^invalid period/)
  await bad(c.fleet('f', { shards: 2, period: -1 }), /^invalid options\.period: -1 ms is negative/)
  await bad(c.fleet('f', { shards: 2, maxHandoffsPerPeriod: 0 }), /^invalid maxHandoffsPerPeriod/)
  await bad(c.fleet('f', { shards: 2, maxHandoffsPerPeriod: -3 }), /^invalid maxHandoffsPerPeriod: -3/)
  await bad(c.fleet('f', { shards: 2, handoffTimeout: 0 }), /^invalid handoffTimeout/)
  await bad(c.fleet('f', { shards: 2, handoffTimeout: Infinity }), /^invalid options\.handoffTimeout/)
  await bad(c.fleet('f', { shards: 2, metadata: 'x' }), /^invalid options\.metadata: expected an object/, TypeError)
  // Nothing was offered, joined or held by the refused calls.
  const page = await c.list({ prefix: 'accord.fleet/' })
  assert.deepEqual(page.items, [])
})

test('Member, MemberWatch, Fleet and ShardLease cannot be built by hand', () => {
  for (const Class of [accord.Member, accord.MemberWatch, accord.Fleet, accord.ShardLease]) {
    assert.equal(typeof Class, 'function')
    assert.throws(() => new Class())
  }
})
