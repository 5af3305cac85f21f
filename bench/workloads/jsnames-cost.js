'use strict'
// The sampler thread's CPU with and without JavaScript names: the main
// thread and three workers run JavaScript (optimized and interpreted) at
// 1 kHz for `ms`; prints the sampler's CPU per tick and the JS samples.
// argv[2]: JSON { js: bool, ms }.
const { Worker } = require('worker_threads')

const opts = JSON.parse(process.argv[2] || '{}')
const BODY = `
function busyFib(n) { return n < 2 ? n : busyFib(n - 1) + busyFib(n - 2) }
function busyLoop(n) { let s = 0; for (let i = 0; i < n; i++) s += i; return s }
const end = Date.now() + ${opts.ms || 3000}
let x = 0
while (Date.now() < end) x += busyFib(18) + busyLoop(3000)
`
const ms = require('../..')
ms.start({ intervalMs: 1, jsNames: opts.js !== false })
const workers = [0, 1, 2].map(() => new Worker(BODY, { eval: true }))
const done = workers.map((w) => new Promise((r) => w.once('exit', r)))
new Function(BODY)()
Promise.all(done).then(() => {
  const s = ms.stats()
  const t0 = process.hrtime.bigint()
  ms.stop()
  const stopNs = Number(process.hrtime.bigint() - t0)
  process.stdout.write(JSON.stringify({ js: opts.js !== false, samplerCpuNs: s.samplerCpuNs, ticks: s.ticks, jsSamples: s.jsSamples, samples: s.samplesCaptured, stopNs }) + '\n')
})
