'use strict'
// The sampler's own cost with many threads. `busy` workers spin; the
// process may also have native idle threads (started by the bench's
// LD_PRELOAD). After `warmMs`, the sampler thread's CPU is measured over
// `seconds`. Also reports how long start() blocked the caller, how long
// until the first sample, and how many threads the profile found.
// argv[2]: JSON { intervalMs, seconds, busy, mode, warmMs }.
const { Worker } = require('worker_threads')
const ms = require('../..')

const o = JSON.parse(process.argv[2] || '{}')
const stop = new Int32Array(new SharedArrayBuffer(4))
const BODY = `const { workerData, parentPort } = require('worker_threads')
parentPort.postMessage(1)
const a = new Int32Array(workerData); let x = 0
while (Atomics.load(a, 0) === 0) x += Math.sqrt(x + 1)`
const workers = Array.from({ length: o.busy ?? 4 }, () => new Worker(BODY, { eval: true, workerData: stop.buffer }))
const sleep = (msec) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, msec)
Promise.all(workers.map((w) => new Promise((r) => w.once('message', r)))).then(() => {
  const t0 = process.hrtime.bigint()
  ms.start({ intervalMs: o.intervalMs ?? 1, mode: o.mode || 'cpu' })
  const startMs = Number(process.hrtime.bigint() - t0) / 1e6
  sleep(o.warmMs ?? 1000)
  const s0 = ms.stats()
  const w0 = process.hrtime.bigint()
  sleep((o.seconds ?? 4) * 1000)
  const s1 = ms.stats()
  const wallNs = Number(process.hrtime.bigint() - w0)
  const p = ms.stop()
  Atomics.store(stop, 0, 1)
  let first = null
  for (const t of p.samples.timeNs) if (first === null || t < first) first = t
  console.log(
    JSON.stringify({
      threads: p.threads.length,
      startMs,
      firstSampleMs: first === null ? null : Number(first - p.startTimeNs) / 1e6,
      samplerCpuPct: ((s1.samplerCpuNs - s0.samplerCpuNs) / wallNs) * 100,
      samplerCpuPerWakeUs: (s1.samplerCpuNs - s0.samplerCpuNs) / Math.max(1, s1.ticks - s0.ticks) / 1000,
      wakeUps: s1.ticks - s0.ticks,
      samples: s1.samplesCaptured - s0.samplesCaptured,
    }),
  )
  process.exit(0)
})
