'use strict'
// CPU-bound: the main thread plus BENCH_WORKERS (3) worker_threads each run a JS kernel for
// BENCH_SECONDS (after a warm-up) and count operations.
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads')
// Loads the addon (when sampling) on every thread, as a preload would.
const { kernel, maybeStartSampler, finish, workerDone } = require('./common')

function run(seconds) {
  let ops = 0
  const end = Date.now() + seconds * 1000
  while (Date.now() < end) {
    for (let k = 0; k < 20; k++) kernel()
    ops += 20
  }
  return ops
}

if (isMainThread) {
  const seconds = Number(process.env.BENCH_SECONDS || 3)
  const workers = Number(process.env.BENCH_WORKERS ?? 3)
  const ws = Array.from({ length: workers }, () => new Worker(__filename, { workerData: { seconds } }))
  const results = ws.map((w) => new Promise((r) => w.on('message', r)))
  run(0.5) // warm-up
  const ms = maybeStartSampler()
  const t0 = Date.now()
  const mainOps = run(seconds)
  Promise.all(results).then((workerOps) => {
    const ops = mainOps + workerOps.reduce((a, b) => a + b, 0)
    finish(ms, { workload: 'cpu', ops, seconds: (Date.now() - t0) / 1000, opsPerSec: ops / seconds })
  })
} else {
  run(0.5)
  const ops = run(workerData.seconds)
  workerDone()
  parentPort.postMessage(ops)
}
