// The chaos run's Node subscriber (chaos/run.py starts it; see chaos/workers/subscriber.py for
// its lines and docs/reliability.md): one client that listens on CHAOS_CHANNEL and reads the
// stream CHAOS_STREAM as the consumer CHAOS_CONSUMER (acking each event after its line), until
// killed.
'use strict'
const path = require('path')
const { connect } = require(path.join(__dirname, '..', '..', 'node'))

const env = process.env
const name = env.CHAOS_NAME
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const say = (event) => process.stdout.write(JSON.stringify({ ...event, t: Date.now() / 1000 }) + '\n')
const err = (e) => String(e && e.message).slice(0, 200)

async function listen(client) {
  let sub
  for (;;) {
    try {
      sub = await client.listen(env.CHAOS_CHANNEL)
      break
    } catch (e) {
      say({ ev: 'error', op: 'listen', err: err(e) })
      await sleep(200)
    }
  }
  say({ ev: 'listening' })
  for await (const event of sub) {
    if (event.type === 'reconnected') say({ ev: 'reconnected' })
    else say({ ev: 'msg', n: Number(event.payload) })
  }
  throw new Error('the listening subscription ended')
}

async function read(client) {
  let sub
  for (;;) {
    try {
      sub = await client.subscribe(env.CHAOS_STREAM, { after: 'earliest', consumer: env.CHAOS_CONSUMER })
      break
    } catch (e) {
      say({ ev: 'error', op: 'subscribe', err: err(e) })
      await sleep(200)
    }
  }
  for await (const event of sub) {
    say({ ev: 'entry', seq: Number(event.seq), p: event.payload })
    try {
      await sub.ack(event.seq)
    } catch (e) {
      // The next ack stores a later position anyway.
      say({ ev: 'error', op: 'ack', seq: Number(event.seq), err: err(e) })
    }
  }
  throw new Error('the stream subscription ended')
}

async function main() {
  let client
  // The server may be restarting or failing over when a worker starts.
  for (;;) {
    try {
      client = await connect(env.CHAOS_URL, { namespace: env.CHAOS_NAMESPACE, owner: name })
      break
    } catch (e) {
      say({ ev: 'error', op: 'connect', err: err(e) })
      await sleep(500)
    }
  }
  say({ ev: 'start', w: name })
  await Promise.all([listen(client), read(client)])
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
