'use strict'
// What the tests need from their environment: the coordinator named by
// ACCORD_TEST_DATABASE_URL (scripts/with-postgres.sh starts one), a namespace and channels of
// their own per test, the coordinator's clock, and real faults (terminated connections, a TCP
// proxy that cuts every connection).

const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const net = require('node:net')
const path = require('node:path')
const { test } = require('node:test')
const pg = require('pg')

const accord = require('..')

const PACKAGE_DIR = path.resolve(__dirname, '..')
const REPO_DIR = path.resolve(PACKAGE_DIR, '..')

function databaseUrl() {
  const url = process.env.ACCORD_TEST_DATABASE_URL
  if (!url) {
    throw new Error(
      'ACCORD_TEST_DATABASE_URL is not set: run the tests with `make test-node` ' +
        '(or scripts/with-postgres.sh make test-node)',
    )
  }
  return url
}

const SEC = 1000

class Harness {
  constructor(name) {
    this.url = databaseUrl()
    this.tag = `${name.replace(/[^a-z0-9]/gi, '_').slice(0, 24)}_${crypto.randomBytes(4).toString('hex')}`
    this.admin = new pg.Client({ connectionString: this.url })
    this.clients = []
    this.proxies = []
  }

  /** Options for a client of this test: its namespace, the owner, a findable application name. */
  options(owner, extra = {}) {
    return { namespace: this.tag, owner, applicationName: this.appName(owner), ...extra }
  }

  appName(owner) {
    return `${this.tag}:${owner}`
  }

  async client(owner, extra = {}, url = this.url) {
    const client = await accord.connect(url, this.options(owner, extra))
    this.clients.push(client)
    return client
  }

  /** A channel name unique to this test. */
  channel(name) {
    return `${name}_${this.tag.slice(-8)}`
  }

  /** The coordinator's clock. */
  async now() {
    const { rows } = await this.admin.query('SELECT clock_timestamp() AS now')
    return rows[0].now
  }

  /** Terminates every server connection of the client of `owner`; returns how many. */
  async terminate(owner) {
    const { rows } = await this.admin.query(
      'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1',
      [this.appName(owner)],
    )
    return rows[0].n
  }

  /** A TCP proxy in front of the coordinator, and the URL that goes through it. */
  async proxy() {
    const upstream = new URL(this.url)
    const proxy = new Proxy(upstream.hostname, Number(upstream.port))
    await proxy.start()
    this.proxies.push(proxy)
    const through = new URL(this.url)
    through.port = String(proxy.port)
    return { proxy, url: through.toString() }
  }

  async close() {
    await Promise.allSettled(this.clients.map((c) => c.close()))
    for (const p of this.proxies) p.close()
    await this.admin.end()
  }
}

/** A test with a harness of its own, closed afterwards whatever happens. */
function scenario(name, fn, options = {}) {
  test(name, { timeout: 60 * SEC, ...options }, async (t) => {
    const h = new Harness(name)
    await h.admin.connect()
    try {
      await fn(h, t)
    } finally {
      await h.close()
    }
  })
}

/** Forwards TCP connections to the coordinator until `cut()`: then closes every connection
 * and refuses new ones (a dead network), until `pass()`. */
class Proxy {
  constructor(host, port) {
    this.upstream = { host, port }
    this.mode = 'pass'
    this.sockets = new Set()
    this.server = net.createServer((client) => {
      if (this.mode === 'cut') {
        client.destroy()
        return
      }
      const server = net.connect(this.upstream)
      for (const [a, b] of [
        [client, server],
        [server, client],
      ]) {
        this.sockets.add(a)
        a.pipe(b)
        a.on('error', () => b.destroy())
        a.on('close', () => {
          this.sockets.delete(a)
          b.destroy()
        })
      }
    })
  }

  start() {
    return new Promise((resolve) => {
      this.server.listen(0, '127.0.0.1', () => {
        this.port = this.server.address().port
        resolve()
      })
    })
  }

  cut() {
    this.mode = 'cut'
    for (const s of this.sockets) s.destroy()
  }

  pass() {
    this.mode = 'pass'
  }

  close() {
    this.cut()
    this.server.close()
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `check` until it holds or `limit` ms pass. */
async function eventually(limit, check) {
  const until = Date.now() + limit
  for (;;) {
    if (await check()) return true
    if (Date.now() >= until) return false
    await sleep(20)
  }
}

/** `promise`, or a failure after `ms`. */
function within(ms, promise, what = 'the operation') {
  let timer
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms)
    }),
  ]).finally(() => clearTimeout(timer))
}

/** `promise`, marked as handled: it may reject before the test awaits it. */
function handled(promise) {
  promise.catch(() => {})
  return promise
}

/** Asserts that `promise` rejects with an accord error of `code`; returns the error. */
/**
 * The next change through reads bounded by 1 ms (or aborted at once): each that ends first
 * rejects, and the change still comes, through a later call. Fails when a bounded read loses
 * what it had begun to read, or when `next()` ignores its bound.
 */
async function nextThroughTinyBounds(source, bound) {
  const until = Date.now() + bound
  for (let i = 0; Date.now() < until; i++) {
    const abort = new AbortController()
    const options = i % 2 === 0 ? { timeout: 1 } : { signal: abort.signal }
    const step = source.next(options)
    if (i % 2 === 1) setImmediate(() => abort.abort())
    try {
      const got = await within(bound, step, 'a bounded next()')
      assert.equal(got.done, false)
      return got.value
    } catch (e) {
      assert.ok(['ACCORD_TIMEOUT', 'ACCORD_CANCELLED'].includes(e.code), `${e.code}: ${e.message}`)
    }
  }
  assert.fail('the change never came through reads with tiny bounds')
}

async function rejectsWith(promise, code, messagePart) {
  let error
  await assert.rejects(promise, (e) => {
    error = e
    return true
  })
  assert.ok(error instanceof Error, `expected an Error, got ${error}`)
  assert.equal(error.code, code, `expected ${code}, got ${error.code}: ${error.message}`)
  if (messagePart) assert.match(error.message, messagePart)
  return error
}

/** Asserts two coordinator timestamps agree within a second. */
function assertClose(a, b) {
  const diff = Math.abs(a.getTime() - b.getTime())
  assert.ok(diff <= 1000, `${a.toISOString()} and ${b.toISOString()} differ by ${diff} ms`)
}

/**
 * Asserts that `expiresAt` was set `ttl` ms past a moment of the coordinator's clock between
 * `before` and `after` (read from it around the call; a second either side for rounding). A
 * slow run widens the bracket instead of failing the check.
 */
function assertSetBetween(expiresAt, before, after, ttl) {
  const low = before.getTime() + ttl - 1000
  const high = after.getTime() + ttl + 1000
  const at = expiresAt.getTime()
  assert.ok(low <= at && at <= high, `${expiresAt.toISOString()} is not within [${low}, ${high}]`)
}

/** Whether the coordinator records `owner` as holding `key` now (read by a fresh client). */
async function holds(h, owner, key) {
  const inspector = await h.client('inspector')
  const page = await inspector.list({ prefix: key })
  await inspector.close()
  return page.items.some((i) => i.key === key && i.state === 'held' && i.owner === owner)
}

/** The next message of a subscription, skipping Reconnected events. */
async function nextMessage(sub, ms = 10 * SEC) {
  for (;;) {
    const step = await within(ms, sub.next(), 'waiting for a notification')
    assert.equal(step.done, false, 'the subscription ended')
    if (step.value.type === 'message') return step.value
  }
}

module.exports = {
  accord,
  assertClose,
  assertSetBetween,
  databaseUrl,
  eventually,
  handled,
  Harness,
  holds,
  nextMessage,
  nextThroughTinyBounds,
  PACKAGE_DIR,
  rejectsWith,
  REPO_DIR,
  scenario,
  SEC,
  sleep,
  within,
}
