'use strict'
// Uncontended tryAcquire + release on one key from Node, the same calls as the core's
// `loopback_latency` example (schema accord_latency, one command connection), so that the two
// can be run side by side against one database and compared:
//
//   ACCORD_URL=postgres://… cargo run --release -p accord --example loopback_latency 5000
//   npm run build && ACCORD_URL=postgres://… node bench/loopback_latency.js 5000
//
// A quick look, not a benchmark suite. Build the addon in release mode first.

const accord = require('..')

function report(name, samples, totalMs) {
  samples.sort((a, b) => a - b)
  const at = (p) => samples[Math.round((samples.length - 1) * p)]
  console.log(
    `${name.padEnd(28)} ${(samples.length / (totalMs / 1000)).toFixed(0).padStart(9)} pairs/s   ` +
      `p50 ${(at(0.5) * 1000).toFixed(1).padStart(7)} µs   p99 ${(at(0.99) * 1000).toFixed(1).padStart(7)} µs`,
  )
}

async function main() {
  const url = process.env.ACCORD_URL
  if (!url) throw new Error('set ACCORD_URL=postgres://…')
  const rounds = Number(process.argv[2] || 5000)
  const client = await accord.connect(url, { schema: 'accord_latency', poolSize: 1, namespace: 'node' })
  for (let round = 0; round < 3; round++) {
    const samples = new Array(rounds)
    const started = performance.now()
    for (let i = 0; i < rounds; i++) {
      const t = performance.now()
      const lease = await client.tryAcquire('k')
      if (!lease) throw new Error('held')
      await lease.release()
      samples[i] = performance.now() - t
    }
    if (round > 0) report('node tryAcquire+release', samples, performance.now() - started)
  }
  await client.close()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
