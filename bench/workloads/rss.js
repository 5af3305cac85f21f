'use strict'
// The sampler's resident memory: 4 busy workers sampled at 1 kHz for
// `seconds`; VmRSS before start(), at the end of sampling and after stop().
// argv[2]: JSON { seconds, bufferSamples }.
const fs = require('fs')
const { Worker } = require('worker_threads')
const ms = require('../..')

const o = JSON.parse(process.argv[2] || '{}')
const rssKiB = () => Number(fs.readFileSync('/proc/self/status', 'utf8').match(/VmRSS:\s+(\d+)/)[1])
const stop = new Int32Array(new SharedArrayBuffer(4))
const BODY = `const { workerData, parentPort } = require('worker_threads')
parentPort.postMessage(1)
const a = new Int32Array(workerData); let x = 0
while (Atomics.load(a, 0) === 0) x += Math.sqrt(x + 1)`
const workers = Array.from({ length: 4 }, () => new Worker(BODY, { eval: true, workerData: stop.buffer }))
Promise.all(workers.map((w) => new Promise((r) => w.once('message', r)))).then(() => {
  const before = rssKiB()
  ms.start({ intervalMs: 1, ...(o.bufferSamples ? { bufferSamples: o.bufferSamples } : {}) })
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, (o.seconds || 2) * 1000)
  const during = rssKiB()
  const p = ms.stop()
  const after = rssKiB()
  Atomics.store(stop, 0, 1)
  console.log(JSON.stringify({ beforeKiB: before, duringKiB: during, afterKiB: after, rows: p.samples.thread.length, samples: p.stats.samplesCaptured, dropped: p.stats.samplesDropped }))
  process.exit(0)
})
