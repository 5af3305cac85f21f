'use strict'
// Reproducer: start() blocked JavaScript for as long as it took to find
// every thread (1.36 s with 9,000 threads), and the sampler missed most
// ticks. Now start() only starts the sampler thread, which finds threads
// in the background; in CPU mode idle threads cost it nothing per tick.
//
//   node stress/repro/scale-start.js [threads]   exit 1 if reproduced

const { verdict, addonScript, withNativeThreads } = require('./lib')

const n = Number(process.argv[2] || 9000)
const PROGRAM = addonScript(`const t0 = process.hrtime.bigint()
ms.start({ intervalMs: 1 })
const startMs = Number(process.hrtime.bigint() - t0) / 1e6
const end = Date.now() + 2000; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)
const p = ms.stop()
console.log(JSON.stringify({ startMs, threads: p.threads.length, samplerCpuMs: p.stats.samplerCpuNs / 1e6, samples: p.stats.samplesCaptured }))`)

const r = withNativeThreads(`idle=${n}`, process.execPath, ['-e', PROGRAM], { timeout: 180000 })
let o = {}
try {
  o = JSON.parse(r.stdout)
} catch {}
// start() grew with the threads (0.3 s for 2,000 of them); what it costs
// without that (V8's code enumeration on the first start(), 6-23 ms on a
// loaded CI machine) is the bench's to measure.
const bad = r.status !== 0 || !(o.startMs <= 50) || o.threads < n
verdict(bad, `status ${r.status}; start() took ${o.startMs?.toFixed(2)} ms with ${o.threads} threads; sampler CPU ${o.samplerCpuMs?.toFixed(0)} ms over 2 s; ${o.samples} samples`)
