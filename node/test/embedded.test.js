'use strict'
// Every store opens by URL: the embedded SQLite file (shared by processes) and memory:.

const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { test } = require('node:test')
const { connect } = require('..')

for (const store of ['sqlite', 'memory']) {
  test(`the ${store} store works like the others`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'accord-node-'))
    const url = store === 'sqlite' ? `sqlite://${path.join(dir, 'accord.db')}` : 'memory:node-tests'
    const a = await connect(url)
    const b = await connect(url)
    try {
      const lease = await a.tryAcquire('k')
      assert.ok(lease)
      assert.equal(await b.tryAcquire('k'), null)
      const sub = await b.listen('node_embedded')
      await lease.done({ by: 'node' })
      await a.notify('node_embedded', 'done')
      const { value } = await sub[Symbol.asyncIterator]().next()
      assert.deepEqual(value, { type: 'message', channel: 'node_embedded', payload: 'done' })
      await sub.close()
      await assert.rejects(b.tryAcquire('k'), (e) => e.code === 'ACCORD_DONE')
      assert.equal(await b.reset('k'), true)
    } finally {
      await a.close()
      await b.close()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
}
