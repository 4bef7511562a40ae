'use strict'
// Elections (E1–E4 of docs/semantics.md) through the Node API, on PostgreSQL: one leader that
// every client and an observer agree on, proclaim (same fence), resign handing over to the
// campaigner waiting in line (larger fence); vacancies (null) after a resignation and a leader's
// expiry; bad input refused naming the field. Waiting
// campaigners are ordered with queuedCount(), never by sleeping.

const assert = require('node:assert/strict')
const { test } = require('node:test')
const { accord, eventually, handled, nextThroughTinyBounds, rejectsWith, scenario, SEC, within } = require('./support')

const TTL = 60 * SEC
const BOUND = 20 * SEC

/** The next change an observer reports (a leader, or null: a vacancy), within a bound. */
async function nextChange(observer) {
  const step = await within(BOUND, observer.next(), 'waiting for a change of leader')
  assert.equal(step.done, false, 'the observer ended')
  return step.value
}

/**
 * The next leader an observer reports, past at most one vacancy: a resignation frees the key
 * before the campaigner in line, woken, takes it, and a read in between finds nobody leading.
 */
async function nextLeader(observer) {
  const seen = (await nextChange(observer)) ?? (await nextChange(observer))
  assert.notEqual(seen, null, 'a vacancy is reported once, then the next leader')
  return seen
}

scenario('E1-E3 one leader, proclaim keeps the fence, resign hands over in line', async (h) => {
  const a = await h.client('a')
  const b = await h.client('b')
  const watcher = await h.client('watcher')
  const election = watcher.election('primary')
  assert.ok(election instanceof accord.Election)
  assert.equal(election.name, 'primary')
  assert.equal(await election.leader(), null)
  const observer = await election.observe()
  assert.ok(observer instanceof accord.Observer)
  assert.equal(observer.closed, false)

  const first = await a.election('primary').campaign('a-value', { ttl: TTL })
  assert.ok(first instanceof accord.Leadership)
  assert.equal(first.election, 'primary')
  assert.equal(first.key, 'accord.election/primary')
  assert.equal(first.owner, 'a')
  assert.equal(first.value, 'a-value')
  assert.equal(typeof first.fence, 'bigint')
  assert.equal(first.status, 'held')
  assert.equal(first.isLost, false)
  assert.equal(first.lostReason, null)
  assert.ok(first.lost instanceof Promise)

  // b waits in line behind a.
  const second = handled(b.election('primary').campaign('b-value', { ttl: TTL, timeout: BOUND }))
  assert.ok(await eventually(BOUND, () => b.queuedCount() === 1), 'b never queued')

  for (const c of [a, b, watcher]) {
    const leader = await c.election('primary').leader()
    assert.equal(leader.owner, 'a')
    assert.equal(leader.value, 'a-value')
    assert.equal(leader.fence, first.fence)
    assert.ok(leader.since instanceof Date)
    assert.ok(leader.expiresAt instanceof Date)
    assert.ok(leader.since < leader.expiresAt)
  }
  const seen = await nextLeader(observer)
  assert.deepEqual([seen.owner, seen.value, seen.fence], ['a', 'a-value', first.fence])

  await first.proclaim('a-new')
  assert.equal(first.value, 'a-new')
  const proclaimed = await nextLeader(observer)
  assert.deepEqual([proclaimed.owner, proclaimed.value, proclaimed.fence], ['a', 'a-new', first.fence])
  assert.equal((await election.leader()).value, 'a-new')

  await first.resign()
  assert.equal(first.status, 'released')
  await first.resign() // again: harmless
  await rejectsWith(first.proclaim('late'), 'ACCORD_LEASE_LOST', /election "primary"/)
  const next = await within(BOUND, second, "b's campaign")
  assert.equal(b.waiterWakeups(), 1)
  assert.ok(next.fence > first.fence)
  const handedOver = await nextLeader(observer)
  assert.deepEqual([handedOver.owner, handedOver.value, handedOver.fence], ['b', 'b-value', next.fence])

  // Disposing resigns; nobody leads afterwards: a vacancy.
  await next[Symbol.asyncDispose]()
  assert.equal(next.status, 'released')
  assert.equal(await election.leader(), null)
  assert.equal(await nextChange(observer), null)

  // close() ends a pending next() and every later one with done.
  const pending = observer.next()
  await observer.close()
  assert.deepEqual(await within(BOUND, pending, 'the pending next'), { done: true, value: undefined })
  assert.equal(observer.closed, true)
  for await (const leader of observer) assert.fail(`a leader after close: ${leader.owner}`)

  // Leaving a for-await loop closes the observer.
  const again = await election.observe()
  const third = await a.election('primary').campaign('a-third', { ttl: TTL })
  for await (const leader of again) {
    assert.deepEqual([leader.owner, leader.value, leader.fence], ['a', 'a-third', third.fence])
    break
  }
  assert.equal(again.closed, true)

  // A closed client's observer rejects with ACCORD_CLOSED; its leadership is lost.
  const last = await b.election('primary').observe()
  assert.equal((await nextLeader(last)).owner, 'a')
  const ending = handled(last.next())
  await a.close()
  assert.equal(third.status, 'lost')
  assert.equal(third.lostReason, 'client_closed')
  await within(BOUND, third.lost, 'the leadership lost')
  await b.close()
  await rejectsWith(ending, 'ACCORD_CLOSED')
  assert.throws(() => b.election('primary'), { code: 'ACCORD_CLOSED' })
})

scenario('E4 an observer reports vacancies: after a resignation and at a dead leader\'s expiry', async (h) => {
  const leader = await h.client('leader')
  const watcher = await h.client('watcher')
  const { proxy, url } = await h.proxy()
  const doomed = await h.client('doomed', {}, url)
  const observer = await watcher.election('e4').observe()
  assert.equal(await nextChange(observer), null) // the current state: nobody leads
  const leading = await leader.election('e4').campaign('v', { ttl: TTL })
  assert.equal((await nextChange(observer)).fence, leading.fence)
  await leading.resign()
  assert.equal(await nextChange(observer), null)
  const dying = await doomed.election('e4').campaign('d', { ttl: SEC })
  const seen = await nextChange(observer)
  assert.deepEqual([seen.owner, seen.fence], ['doomed', dying.fence])
  proxy.cut() // the leader's process, as the coordinator sees it, died
  // Reported at the lease's expiry, a second after its last renewal; BOUND only bounds a hang.
  assert.equal(await nextChange(observer), null)
  assert.equal(await watcher.election('e4').leader(), null)
  await observer.close()
})

scenario('E5 observer reads bounded by a timeout or a signal lose no change', async (h) => {
  const leader = await h.client('leader')
  const watcher = await h.client('watcher')
  const observer = await watcher.election('e5').observe()
  assert.equal(await nextChange(observer), null)
  // Nothing changes: a bound ends the read, naming what it waited for.
  await rejectsWith(observer.next({ timeout: 20 }), 'ACCORD_TIMEOUT', /no leader change within 20 ms/)
  const abort = new AbortController()
  const pending = observer.next({ signal: abort.signal })
  abort.abort()
  await rejectsWith(pending, 'ACCORD_CANCELLED')
  await rejectsWith(observer.next({ timeout: -1 }), 'ACCORD_INVALID_ARGUMENT', /options\.timeout/)
  await rejectsWith(observer.next({ timeot: 1 }), 'ACCORD_INVALID_ARGUMENT', /timeot/)
  for (let round = 0; round < 3; round++) {
    const leading = await leader.election('e5').campaign(`v${round}`, { ttl: TTL })
    assert.equal((await nextThroughTinyBounds(observer, BOUND)).fence, leading.fence)
    await leading.resign()
    assert.equal(await nextThroughTinyBounds(observer, BOUND), null)
  }
  await observer.close()
})

scenario('a waiting campaign gives up on timeout or abort, leaving its place in line', async (h) => {
  const a = await h.client('a')
  const b = await h.client('b')
  const leading = await a.election('e').campaign('a', { ttl: TTL })
  await rejectsWith(b.election('e').campaign('b', { timeout: 100 }), 'ACCORD_TIMEOUT')
  const controller = new AbortController()
  const aborted = handled(b.election('e').campaign('b', { signal: controller.signal }))
  assert.ok(await eventually(BOUND, () => b.queuedCount() === 1), 'b never queued')
  controller.abort()
  await rejectsWith(aborted, 'ACCORD_CANCELLED')
  assert.equal(b.queuedCount(), 0)
  await rejectsWith(b.election('e').campaign('b', { signal: controller.signal }), 'ACCORD_CANCELLED')
  await leading.resign()
  const next = await within(BOUND, b.election('e').campaign('b', { timeout: BOUND }), "b's campaign")
  assert.ok(next.fence > leading.fence)
  await next.resign()
})

scenario('election calls refuse bad arguments naming the field', async (h) => {
  const c = await h.client('c')
  const invalid = (call, pattern, type = Error) =>
    assert.throws(call, (e) => {
      assert.equal(e.code, 'ACCORD_INVALID_ARGUMENT')
      assert.match(e.message, pattern)
      assert.ok(e instanceof type, `${e.constructor.name}: ${e.message}`)
      return true
    })
  invalid(() => c.election(''), /^invalid election: must not be empty/)
  invalid(() => c.election(7), /^invalid name: expected a string, got a number/, TypeError)
  invalid(() => c.election(), /^invalid name: expected a string, got undefined/, TypeError)
  const e = c.election('e')
  const bad = (promise, pattern, type = Error) =>
    rejectsWith(promise, 'ACCORD_INVALID_ARGUMENT', pattern).then((err) =>
      assert.ok(err instanceof type, `${err.constructor.name}: ${err.message}`),
    )
  await bad(e.campaign(), /^invalid value: expected a string, got undefined/, TypeError)
  await bad(e.campaign('v', 'x'), /^invalid options: expected an object, got a string/, TypeError)
  await bad(e.campaign('v', { ttl: 5 }), /^invalid options\.ttl: 5 ms is outside the allowed range 100 ms\.\.=86400000 ms/)
  await bad(e.campaign('v', { timeout: -1 }), /^invalid options\.timeout: -1 ms is negative/)
  await bad(e.campaign('v', { signal: {} }), /^invalid options\.signal: expected an AbortSignal/)

  const leading = await e.campaign('v', { ttl: TTL })
  await bad(leading.proclaim(3), /^invalid value: expected a string, got a number/, TypeError)
  assert.equal(leading.value, 'v')
  await leading.resign()
  // Nothing is held by the refused calls.
  assert.deepEqual((await c.list({ state: 'held' })).items, [])
})

test('Election, Leadership and Observer cannot be built by hand', () => {
  for (const Class of [accord.Election, accord.Leadership, accord.Observer]) {
    assert.equal(typeof Class, 'function')
    assert.throws(() => new Class())
  }
})
