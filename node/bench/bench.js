'use strict'
// `make bench-node` (mk/bench-node.mk): accord's Node binding against the Node peers people reach
// for, on the uncontended workload of bench/README.md (the contract: environment, JSON, ids).
//
//   ACCORD_BENCH_URL=postgres://… ACCORD_BENCH_OUT=target/bench/node.json node node/bench/bench.js
//
// Build the addon in release mode first (`make build-node`; `make test-node` leaves a debug one).
//
// Contenders, one client and one key (`bench-<id>`) each, and what one measured pair sends:
//
//   node/accord         accord.connect(url, {schema: 'accord_bench', poolSize: 1}), then
//                       tryAcquire(key) + lease.release(): two prepared statements on its one
//                       command connection, one round trip each (Bind/Execute/Sync): the acquire
//                       upsert (INSERT … ON CONFLICT DO UPDATE on accord_bench.leases, nextval of
//                       the fence sequence) and the release (UPDATE … RETURNING, pg_notify of its
//                       wakeup channel). Each is its own transaction and commits a row write.
//                       (The client also keeps a listening connection, idle here.)
//   node/advisory-lock  advisory-lock 2.0.0 as its README shows it: mutex = advisoryLock(url)(name),
//                       unlock = await mutex.tryLock(), await unlock(). tryLock opens a NEW
//                       pg.Client for every pair (TCP connect, TLS handshake when on, startup,
//                       SCRAM-SHA-256 authentication), sends `SELECT pg_try_advisory_lock(k1, k2)`
//                       (simple query, the two int4 halves of a sha256 of the name inlined), then
//                       unlock sends `SELECT pg_advisory_unlock(k1, k2)` and ends that connection
//                       (Terminate, not awaited by the package). The package takes a connection
//                       string only: there is no way to hand it a client or a pool.
//   node/pg             raw node-postgres, what people write by hand: one pg.Client, then
//                       `SELECT pg_try_advisory_lock($1)` and `SELECT pg_advisory_unlock($1)` with a
//                       bigint parameter (extended protocol, unnamed statement: Parse/Bind/
//                       Describe/Execute/Sync, one round trip each; no transaction, no row write).
//
// TLS. accord reads the URL as libpq does: without `sslmode` it is `prefer`, i.e. TLS whenever the
// server offers it, without checking the certificate (the throwaway cluster of
// scripts/with-postgres.sh offers TLS, so accord runs encrypted there). node-postgres reads
// `sslmode` its own way (prefer/require mean verify-full unless `uselibpqcompat=true`, and it never
// falls back to plaintext), so the URL handed to advisory-lock and pg is rewritten here to mean
// what it means to accord: `uselibpqcompat=true` and, for an absent/allow/prefer sslmode, TLS
// without certificate checks if a probe finds the server offers TLS, `sslmode=disable` otherwise.
// Then, with each contender holding its key once before the warmup, pg_stat_ssl is read for its
// connections (by application_name) and the run stops unless all three agree: either every
// contender is on TLS or none is. The result is in "metrics": {"tls": 1 or 0}.

const crypto = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')

const accord = require('..')
const advisoryLock = require('advisory-lock').default
const pg = require('pg')

const APP = 'accord-bench-node'

function envInt(name, fallback) {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a whole number, not ${JSON.stringify(raw)}`)
  return n
}

function packageVersion(dir) {
  return JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// ---------------------------------------------------------------------------------------------
// The URL for node-postgres (and advisory-lock, which hands it to node-postgres), meaning what the
// same URL means to accord; see the TLS note above.

function libpqSslmode(url) {
  if (!/^postgres(ql)?:\/\//.test(url)) {
    throw new Error('ACCORD_BENCH_URL must be a postgres:// or postgresql:// URL')
  }
  const mode = new URL(url).searchParams.get('sslmode') || 'prefer'
  const known = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full']
  if (!known.includes(mode)) throw new Error(`sslmode ${JSON.stringify(mode)} is not one of ${known.join(', ')}`)
  return mode
}

// `pgMode` is the sslmode node-postgres gets (libpq's meaning, thanks to uselibpqcompat).
function pgUrl(url, pgMode, applicationName) {
  const u = new URL(url)
  u.searchParams.delete('uselibpqcompat')
  u.searchParams.delete('sslmode')
  // accord checks the certificate for verify-ca / verify-full, and for require when a root
  // certificate is named (as libpq does); the bench passes none below verify-ca, so that
  // node-postgres and accord check the same.
  if (pgMode !== 'verify-ca' && pgMode !== 'verify-full') u.searchParams.delete('sslrootcert')
  u.searchParams.set('uselibpqcompat', 'true')
  u.searchParams.set('sslmode', pgMode)
  u.searchParams.set('application_name', applicationName)
  return u.toString()
}

// libpq's prefer: TLS if the server offers it, plaintext if it says it cannot.
async function resolvePgMode(url) {
  const mode = libpqSslmode(url)
  if (mode !== 'allow' && mode !== 'prefer') return mode
  const probe = new pg.Client({ connectionString: pgUrl(url, 'prefer', `${APP}/probe`) })
  try {
    await probe.connect()
    return 'prefer'
  } catch (e) {
    if (/does not support SSL/i.test(String(e && e.message))) return 'disable'
    throw e
  } finally {
    await probe.end().catch(() => {})
  }
}

// ---------------------------------------------------------------------------------------------
// Contenders: `setup()` connects, `lock()` takes the key (throws unless it was granted) and
// returns the function that gives it back, `close()`. One measured operation is a lock() and its
// unlock (`pair`); `holding` runs a function while the key is held (for the TLS check).

async function pair(contender) {
  const unlock = await contender.lock()
  await unlock()
}

async function holding(contender, fn) {
  const unlock = await contender.lock()
  try {
    return await fn()
  } finally {
    await unlock()
  }
}

function int64Key(name) {
  return crypto.createHash('sha256').update(name).digest().readBigInt64LE(0).toString()
}

function accordContender(url) {
  const id = 'node/accord'
  const key = `bench-${id}`
  let client
  return {
    id,
    label: 'accord, Node (tryAcquire + release, poolSize 1)',
    applicationName: `${APP}/accord`,
    newConnectionsPerOp: 0,
    async setup() {
      client = await accord.connect(url, {
        schema: 'accord_bench',
        poolSize: 1,
        applicationName: this.applicationName,
      })
    },
    async lock() {
      const lease = await client.tryAcquire(key)
      if (!lease) throw new Error(`${id}: tryAcquire(${key}) found the key held`)
      return () => lease.release()
    },
    async close() {
      await client.close()
    },
  }
}

function advisoryLockContender(url, pgMode) {
  const id = 'node/advisory-lock'
  const applicationName = `${APP}/advisory-lock`
  let mutex
  return {
    id,
    label: 'advisory-lock (npm), mutex.tryLock + unlock',
    applicationName,
    newConnectionsPerOp: 1,
    async setup() {
      mutex = advisoryLock(pgUrl(url, pgMode, applicationName))(`bench-${id}`)
    },
    async lock() {
      const unlock = await mutex.tryLock()
      if (!unlock) throw new Error(`${id}: tryLock found the lock held`)
      return unlock
    },
    async close() {},
  }
}

function pgContender(url, pgMode) {
  const id = 'node/pg'
  const applicationName = `${APP}/pg`
  const key = int64Key(`bench-${id}`)
  let client
  const lock = async () => {
    const r = await client.query('SELECT pg_try_advisory_lock($1)', [key])
    if (r.rows[0].pg_try_advisory_lock !== true) throw new Error(`${id}: pg_try_advisory_lock(${key}) returned false`)
  }
  const unlock = async () => {
    const r = await client.query('SELECT pg_advisory_unlock($1)', [key])
    if (r.rows[0].pg_advisory_unlock !== true) throw new Error(`${id}: pg_advisory_unlock(${key}) returned false`)
  }
  return {
    id,
    label: 'node-postgres by hand, pg_try_advisory_lock + pg_advisory_unlock',
    applicationName,
    newConnectionsPerOp: 0,
    async setup() {
      client = new pg.Client({ connectionString: pgUrl(url, pgMode, applicationName) })
      await client.connect()
    },
    async lock() {
      await lock()
      return unlock
    },
    async close() {
      await client.end()
    },
  }
}

// accord's own two statements (written by the Rust bench to statements.json: see bench/README.md)
// sent by hand through node-postgres, prepared once like accord's: the floor of what accord's
// Node package could cost, as rust/raw-sql is the Rust core's.
function pgAccordSqlContender(url, pgMode, statements) {
  const id = 'node/pg-accord-sql'
  const applicationName = `${APP}/pg-accord-sql`
  const key = `bench-${id}`
  let client
  let attempt = BigInt(Math.floor(Math.random() * 2 ** 40)) * 1000000n
  const acquire = async () => {
    attempt += 1n
    const r = await client.query({
      name: 'accord-acquire',
      text: statements.acquire,
      values: [statements.namespace, key, 'pg-accord-sql', attempt.toString(), '30000', null],
      rowMode: 'array',
    })
    if (r.rows.length === 0 || r.rows[0][0] !== true) throw new Error(`${id}: ${key} is held`)
    return r.rows[0][1]
  }
  const release = async (fence) => {
    const r = await client.query({
      name: 'accord-release',
      text: statements.release,
      values: [statements.namespace, key, 'pg-accord-sql', fence, statements.wakeup_channel],
      rowMode: 'array',
    })
    if (Number(r.rows[0][0]) !== 1) throw new Error(`${id}: release of ${key} found no lease`)
  }
  return {
    id,
    label: "node-postgres by hand, accord's own two statements",
    applicationName,
    newConnectionsPerOp: 0,
    async setup() {
      client = new pg.Client({ connectionString: pgUrl(url, pgMode, applicationName) })
      await client.connect()
    },
    async lock() {
      const fence = await acquire()
      return () => release(fence)
    },
    async close() {
      await client.end()
    },
  }
}

// ---------------------------------------------------------------------------------------------

async function run(contender, n, into) {
  const started = process.hrtime.bigint()
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint()
    await pair(contender)
    if (into) into.push(Number(process.hrtime.bigint() - t) / 1000)
  }
  return Number(process.hrtime.bigint() - started) / 1e9
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]
}

async function main() {
  const url = process.env.ACCORD_BENCH_URL
  const out = process.env.ACCORD_BENCH_OUT
  if (!url) throw new Error('set ACCORD_BENCH_URL=postgres://… (make bench starts a throwaway PostgreSQL)')
  if (!out) throw new Error('set ACCORD_BENCH_OUT to the JSON file to write')
  const pairs = envInt('ACCORD_BENCH_PAIRS', 5000)
  const warmup = envInt('ACCORD_BENCH_WARMUP', 500)
  if (pairs < 2) throw new Error('ACCORD_BENCH_PAIRS must be at least 2 (measured in two halves)')

  const pgMode = await resolvePgMode(url)
  const contenders = [accordContender(url), advisoryLockContender(url, pgMode), pgContender(url, pgMode)]
  const statementsFile = process.env.ACCORD_BENCH_STATEMENTS
  if (statementsFile && fs.existsSync(statementsFile)) {
    contenders.push(pgAccordSqlContender(url, pgMode, JSON.parse(fs.readFileSync(statementsFile, 'utf8'))))
  } else {
    console.error('node bench: no ACCORD_BENCH_STATEMENTS file (the Rust bench writes it): node/pg-accord-sql left out')
  }
  const admin = new pg.Client({ connectionString: pgUrl(url, pgMode, `${APP}/admin`) })
  await admin.connect()
  for (const c of contenders) await c.setup()

  // The same TLS for all, checked on the server while each holds its key (advisory-lock's
  // connection lives only that long).
  const tls = {}
  for (const c of contenders) {
    const rows = await holding(c, async () => {
      const r = await admin.query(
        `SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
          WHERE a.application_name = $1`,
        [c.applicationName],
      )
      return r.rows
    })
    if (rows.length === 0) throw new Error(`${c.id}: no connection named ${c.applicationName} in pg_stat_activity`)
    const states = new Set(rows.map((r) => r.ssl))
    if (states.size !== 1) throw new Error(`${c.id}: its connections disagree on TLS`)
    tls[c.id] = rows[0].ssl
  }
  await admin.end()
  if (new Set(Object.values(tls)).size !== 1) {
    throw new Error(`the contenders do not all use TLS alike (${JSON.stringify(tls)}): not a fair comparison`)
  }

  // Warmup, then the measured pairs in two halves, interleaved (A B C A B C). A short pause between
  // segments lets the server finish ending advisory-lock's connections before the next contender.
  const half = [Math.floor(pairs / 2), pairs - Math.floor(pairs / 2)]
  const samples = new Map(contenders.map((c) => [c.id, []]))
  const seconds = new Map(contenders.map((c) => [c.id, 0]))
  for (const c of contenders) {
    await run(c, warmup, null)
    await sleep(200)
  }
  for (const n of half) {
    for (const c of contenders) {
      seconds.set(c.id, seconds.get(c.id) + (await run(c, n, samples.get(c.id))))
      await sleep(200)
    }
  }
  for (const c of contenders) await c.close()

  const results = contenders.map((c) => ({
    id: c.id,
    label: c.label,
    ops: pairs,
    seconds: seconds.get(c.id),
    latencies_us: samples.get(c.id),
    metrics: { tls: tls[c.id] ? 1 : 0, new_connections_per_op: c.newConnectionsPerOp },
  }))
  const doc = {
    source: 'node',
    versions: {
      node: process.versions.node,
      accord: packageVersion(path.join(__dirname, '..')),
      'advisory-lock': packageVersion(path.dirname(require.resolve('advisory-lock/package.json'))),
      pg: packageVersion(path.dirname(require.resolve('pg/package.json'))),
    },
    results,
  }
  fs.writeFileSync(out, JSON.stringify(doc) + '\n')

  const anyTls = Object.values(tls)[0]
  console.log(`node bench: ${pairs} pairs per contender after ${warmup} warmup, TLS ${anyTls ? 'on' : 'off'} for all`)
  for (const r of results) {
    const sorted = [...r.latencies_us].sort((a, b) => a - b)
    console.log(
      `  ${r.id.padEnd(20)} p50 ${percentile(sorted, 0.5).toFixed(1).padStart(8)} µs   ` +
        `p99 ${percentile(sorted, 0.99).toFixed(1).padStart(8)} µs   ` +
        `${(r.ops / r.seconds).toFixed(0).padStart(7)} pairs/s`,
    )
  }
  console.log(`  wrote ${out}`)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
