'use strict'
// CPU-bound: the main thread plus 3 worker_threads each run a JS kernel for
// BENCH_SECONDS (after a warm-up) and count operations.
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads')

function kernel() {
  // A mix of numeric work, allocation and string building, so the stacks
  // cover JIT code, the GC and runtime builtins.
  let acc = 0
  const arr = []
  for (let i = 0; i < 2000; i++) {
    acc += Math.sqrt(i * 1.5) * Math.sin(i)
    if (i % 50 === 0) arr.push({ i, s: 'v' + i })
  }
  return acc + JSON.stringify(arr).length
}

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
  const { maybeStartSampler, finish } = require('./common')
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
  require('./common') // loads the addon here too, as a preload would
  run(0.5)
  parentPort.postMessage(run(workerData.seconds))
}
