'use strict'
// A Node worker of the polyglot streams run (tests/polyglot/streams.py): publishes to a stream,
// or reads it, and prints one line per step:
//
//   node stream_worker.js URL NAMESPACE publish STREAM COUNT TAG
//       publishes COUNT events, payload i = `${TAG}:${i}:` + EXTRA[i % 4] (i = 1..COUNT), in
//       rounds of 10 concurrent publishes: `PUBLISHED <i> <seq>` per event, then `DONE`
//   node stream_worker.js URL NAMESPACE subscribe STREAM CONSUMER COUNT
//       reads from the earliest event (as consumer CONSUMER; `-`: none): `EVENT <seq> <sha256
//       of the payload's UTF-8, hex>` per event, acked after the line when there is a consumer;
//       exits after COUNT events
//   node stream_worker.js URL NAMESPACE consume-slowly STREAM CONSUMER
//       reads from the earliest event as consumer CONSUMER: `RECEIVED <seq>`, then a line of
//       standard input (`ack`), then the ack and `ACKED <seq>`; exits at the end of standard
//       input

const crypto = require('node:crypto')
const path = require('node:path')
const readline = require('node:readline')

const accord = require(path.join(__dirname, '..', '..', 'node'))

const EXTRA = ['', 'nul\u0000byte', 'é中🦀', 'quote\'"\\$accord$']
const ROUND = 10

/** One line on standard output (synchronous on a pipe or a file: written at once). */
function say(line) {
  process.stdout.write(`${line}\n`)
}

function sha256(payload) {
  return crypto.createHash('sha256').update(payload, 'utf8').digest('hex')
}

async function publish(client, stream, count, tag) {
  for (let first = 1; first <= count; first += ROUND) {
    const round = []
    for (let i = first; i < first + ROUND && i <= count; i++) round.push(i)
    const seqs = await Promise.all(
      round.map((i) => client.publish(stream, `${tag}:${i}:${EXTRA[i % 4]}`)),
    )
    round.forEach((i, n) => say(`PUBLISHED ${i} ${seqs[n]}`))
  }
  say('DONE')
}

async function subscribe(client, stream, consumer, count) {
  if (count <= 0) return
  const sub = await client.subscribe(stream, {
    after: 'earliest',
    consumer: consumer === '-' ? undefined : consumer,
  })
  let seen = 0
  for await (const event of sub) {
    say(`EVENT ${event.seq} ${sha256(event.payload)}`)
    if (sub.consumer !== null) await sub.ack(event.seq)
    if (++seen === count) break
  }
}

async function consumeSlowly(client, stream, consumer) {
  // The end of standard input ends a wait for the next event too.
  const stop = new AbortController()
  const input = readline.createInterface({ input: process.stdin })
  input.once('close', () => stop.abort())
  const lines = input[Symbol.asyncIterator]()
  const sub = await client.subscribe(stream, { after: 'earliest', consumer, signal: stop.signal })
  for await (const event of sub) {
    say(`RECEIVED ${event.seq}`)
    const { done } = await lines.next()
    if (done) break
    await sub.ack(event.seq)
    say(`ACKED ${event.seq}`)
  }
  input.close()
}

async function main() {
  const [url, namespace, mode, ...args] = process.argv.slice(2)
  const client = await accord.connect(url, { namespace })
  try {
    if (mode === 'publish') {
      const [stream, count, tag] = args
      await publish(client, stream, Number(count), tag)
    } else if (mode === 'subscribe') {
      const [stream, consumer, count] = args
      await subscribe(client, stream, consumer, Number(count))
    } else if (mode === 'consume-slowly') {
      const [stream, consumer] = args
      await consumeSlowly(client, stream, consumer)
    } else {
      throw new Error(`unknown mode ${mode}`)
    }
  } finally {
    await client.close()
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e)
    process.exit(1)
  },
)
