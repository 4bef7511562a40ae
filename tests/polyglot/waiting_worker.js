'use strict'
// A Node worker of the polyglot waiting run: waits in a key's line, or campaigns in an election,
// and prints one line per step:
//
//   READY <owner>
//   GRANTED <fence>        (wait) its turn came
//   LEADER <fence>         (campaign) it leads
//   LOST                   the lease or leadership was lost while held
//   RELEASED <wake-ups>    (wait) after a line on standard input: released; how many times a
//                          release woke this worker's waiting acquire
//   RESIGNED               (campaign) after a line on standard input: resigned
//
//   node waiting_worker.js URL NAMESPACE wait KEY TTL_MS [shared]
//   node waiting_worker.js URL NAMESPACE campaign NAME VALUE TTL_MS

const path = require('node:path')

const accord = require(path.join(__dirname, '..', '..', 'node'))

/** One line on standard output (synchronous on a pipe or a file: written at once). */
function say(line) {
  process.stdout.write(`${line}\n`)
}

/** Resolves on a line (or the end) of standard input; says LOST if `lost` resolves first. */
async function untilToldOrLost(lost) {
  const told = new Promise((resolve) => {
    process.stdin.once('data', resolve)
    process.stdin.once('end', resolve)
  })
  const first = await Promise.race([told.then(() => 'told'), lost.then(() => 'lost')])
  if (first === 'lost') {
    say('LOST')
    await told
  }
  process.stdin.pause()
}

async function main() {
  const [url, namespace, mode, ...args] = process.argv.slice(2)
  const owner = `node-${process.pid}`
  const client = await accord.connect(url, { namespace, owner })
  say(`READY ${owner}`)
  if (mode === 'wait') {
    const [key, ttl, shared] = args
    const lease = await client.acquire(key, { ttl: Number(ttl), shared: shared === 'shared' })
    say(`GRANTED ${lease.fence}`)
    await untilToldOrLost(lease.lost)
    await lease.release().catch(() => {})
    say(`RELEASED ${client.waiterWakeups()}`)
  } else if (mode === 'campaign') {
    const [name, value, ttl] = args
    const leadership = await client.election(name).campaign(value, { ttl: Number(ttl) })
    say(`LEADER ${leadership.fence}`)
    await untilToldOrLost(leadership.lost)
    await leadership.resign().catch(() => {})
    say('RESIGNED')
  } else {
    throw new Error(`unknown mode ${mode}`)
  }
  await client.close()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
