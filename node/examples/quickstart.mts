// The quick start: a lease with its fence and lost signal, done-marking, and notifications.
//   ACCORD_URL=postgres://app:secret@localhost/app node quickstart.mjs   (after tsc)
// It resets the key it marks done at the end, so that it runs again and again, before or after
// the other languages' quick starts (the same namespace and key).
import { connect } from 'accord-coord'

const url = process.env.ACCORD_URL ?? 'postgres://app:secret@localhost/app'
await using client = await connect(url, { namespace: 'reports', ttl: 10_000 })

// Wait up to 5 s for the key; the lease renews itself in the background and is released at
// the end of the block (`await using`), whatever happens in it.
{
  await using lease = await client.acquire('daily/2026-11-22', { timeout: 5_000 })
  console.log(`holding ${lease.key} with fence ${lease.fence}`)
  const work = new Promise<'worked'>((resolve) => setTimeout(resolve, 1_000, 'worked'))
  if ((await Promise.race([work, lease.lost])) === 'worked') {
    // ... pass lease.fence to whatever you write, so that it can refuse a stale holder ...
    await lease.done({ rows: 42 }) // never granted again until client.reset(key)
  } else {
    console.error('lost the lease: stop writing')
  }
}

// Notifications, from any client or from SQL (`NOTIFY jobs, 'hi'`).
await using subscription = await client.listen('jobs')
await client.notify('jobs', 'report ready')
for await (const event of subscription) {
  if (event.type === 'message') {
    console.log(`${event.channel}: ${event.payload}`)
    break // leaving the loop closes the subscription
  }
}

// What the coordinator knows: keys with their state, holder, fence, expiry and metadata.
const { items } = await client.list({ prefix: 'daily/', state: 'done' })
for (const info of items) console.log(info.key, info.state, info.fence, info.metadata)
// Done is final until reset: reset makes the key acquirable again, so that this runs again.
await client.reset('daily/2026-11-22')
