// A worker pool: workers share a bucket of files, each processed exactly once. The files are
// offered once to the work pool `bucket/`; each worker claims a batch of free ones (nobody walks
// the names: the coordinator hands each free key to one claimer), processes each while its lease
// renews itself, and marks it done; a file whose worker crashed is claimable again once its
// lease expires. Ctrl-C (an AbortSignal) stops waiting workers, leaving nothing held.
//   ACCORD_URL=postgres://… node worker-pool.mjs [workers] [files]
import { connect } from 'accord-coord'

const url = process.env.ACCORD_URL ?? 'postgres://app:secret@localhost/app'
const workers = Number(process.argv[2] ?? 4)
const pool = 'bucket/'
const files = Array.from({ length: Number(process.argv[3] ?? 20) }, (_, i) => `${pool}file-${i}.csv`)
const namespace = process.env.ACCORD_NAMESPACE ?? 'worker-pool'

const shutdown = new AbortController()
process.once('SIGINT', () => shutdown.abort())

async function worker(id: number): Promise<number> {
  await using client = await connect(url, { namespace, owner: `worker-${id}` })
  let processed = 0
  while (!shutdown.signal.aborted) {
    // Up to 5 free files in one statement; none left: this worker is finished.
    const leases = await client.claim(pool, { limit: 5, ttl: 5_000, signal: shutdown.signal })
    if (leases.length === 0) break
    for (const lease of leases) {
      // ... process the file, writing with lease.fence so that storage can refuse a stale one ...
      await new Promise((resolve) => setTimeout(resolve, 20))
      if (lease.isLost) continue // too slow: another worker will redo it
      await lease.done({ by: client.owner, fence: String(lease.fence) })
      processed += 1
    }
  }
  return processed
}

{
  await using offerer = await connect(url, { namespace, owner: 'offerer' })
  console.log(`offered ${await offerer.offer(pool, files)} new files`)
}
const counts = await Promise.all(Array.from({ length: workers }, (_, i) => worker(i)))
console.log(`processed ${counts.reduce((a, b) => a + b, 0)} of ${files.length} files:`, counts)

// A supervisor waits for a lock held by someone else, but gives up on Ctrl-C.
await using supervisor = await connect(url, { namespace, owner: 'supervisor' })
try {
  await using report = await supervisor.acquire('report', { timeout: 10_000, signal: shutdown.signal })
  const left = await supervisor.counts(pool)
  console.log(`pool ${pool}: ${left.free} free, ${left.held} held, ${left.done} done`)
  const done = await supervisor.list({ prefix: pool, state: 'done', limit: 1000 })
  console.log(`report (fence ${report.fence}): ${done.items.length} files done`)
  for (const info of done.items) await supervisor.reset(info.key) // ready for the next run
} catch (e) {
  const code = (e as { code?: string }).code
  if (code !== 'ACCORD_CANCELLED' && code !== 'ACCORD_TIMEOUT') throw e
  console.log(`no report: ${code}`)
}
