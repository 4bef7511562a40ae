// A listener: prints every notification on the given channels, from any language, client or
// SQL (`NOTIFY jobs, 'hi'`), until Ctrl-C. After a `reconnected` event, notifications sent while
// the connection was down were missed: re-read whatever state they were about.
//   ACCORD_URL=postgres://… node listener.mjs jobs alerts
import { connect } from 'accord-coord'

const url = process.env.ACCORD_URL ?? 'postgres://app:secret@localhost/app'
const channels = process.argv.length > 2 ? process.argv.slice(2) : ['jobs']

await using client = await connect(url)
const subscription = await client.listen(...channels)
process.once('SIGINT', () => void subscription.close()) // ends the loop below
console.log(`listening on ${subscription.channels.join(', ')}`)
for await (const event of subscription) {
  switch (event.type) {
    case 'message':
      console.log(`${new Date().toISOString()} ${event.channel}: ${event.payload}`)
      if (event.payload === 'quit') await subscription.close()
      break
    case 'reconnected':
      console.log('reconnected: notifications may have been missed')
      break
  }
}
