// A worker pool: workers share a bucket of files, each processed exactly once. A worker takes a
// free file with tryAcquire, processes it while its lease renews itself, and marks it done;
// a file whose worker crashed is picked up by another once the lease expires. Ctrl-C (an
// AbortSignal) stops waiting workers, leaving nothing held.
//   ACCORD_URL=postgres://… node worker-pool.mjs [workers] [files]
import { connect, type Client, type Lease } from 'accord-coord'

const url = process.env.ACCORD_URL ?? 'postgres://app:secret@localhost/app'
const workers = Number(process.argv[2] ?? 4)
const files = Array.from({ length: Number(process.argv[3] ?? 20) }, (_, i) => `file-${i}.csv`)
const namespace = process.env.ACCORD_NAMESPACE ?? 'worker-pool'

const shutdown = new AbortController()
process.once('SIGINT', () => shutdown.abort())

/** Takes the first file nobody holds and nobody finished, or null once there is none. */
async function take(client: Client): Promise<Lease | null> {
  for (const file of files) {
    try {
      const lease = await client.tryAcquire(`bucket/${file}`, { ttl: 5_000 })
      if (lease) return lease
    } catch (e) {
      if ((e as { code?: string }).code !== 'ACCORD_DONE') throw e // done: someone finished it
    }
  }
  return null
}

async function worker(id: number): Promise<number> {
  await using client = await connect(url, { namespace, owner: `worker-${id}` })
  let processed = 0
  while (!shutdown.signal.aborted) {
    const lease = await take(client)
    if (!lease) break
    // ... process the file, writing with lease.fence so that storage can refuse a stale one ...
    await new Promise((resolve) => setTimeout(resolve, 20))
    if (lease.isLost) continue // too slow: another worker will redo it
    await lease.done({ by: client.owner, fence: String(lease.fence) })
    processed += 1
  }
  return processed
}

const counts = await Promise.all(Array.from({ length: workers }, (_, i) => worker(i)))
console.log(`processed ${counts.reduce((a, b) => a + b, 0)} of ${files.length} files:`, counts)

// A supervisor waits for a lock held by someone else, but gives up on Ctrl-C.
await using supervisor = await connect(url, { namespace, owner: 'supervisor' })
try {
  await using report = await supervisor.acquire('report', { timeout: 10_000, signal: shutdown.signal })
  const done = await supervisor.list({ prefix: 'bucket/', state: 'done', limit: 1000 })
  console.log(`report (fence ${report.fence}): ${done.items.length} files done`)
  for (const info of done.items) await supervisor.reset(info.key) // ready for the next run
} catch (e) {
  const code = (e as { code?: string }).code
  if (code !== 'ACCORD_CANCELLED' && code !== 'ACCORD_TIMEOUT') throw e
  console.log(`no report: ${code}`)
}
