'use strict'
// Every kind of thread busy at once, for complete-stack and fidelity
// figures: JavaScript on the main thread and in a worker, 8 crypto.pbkdf2
// and 8 zlib.gzip jobs kept in flight on the libuv pool, and a loop that
// makes garbage (so V8's platform threads mark and sweep). Another addon's
// thread comes from the bench's LD_PRELOAD (native-threads.c `sort`).
// BENCH_SECONDS long; writes its pid to BENCH_PID_FILE and waits
// BENCH_START_DELAY ms first (so perf can attach).
const fs = require('fs')
const zlib = require('zlib')
const crypto = require('crypto')
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads')

function fib(n) {
  return n < 2 ? n : fib(n - 1) + fib(n - 2)
}

// A live set that keeps being replaced: objects survive into the old
// generation and die there, so major GCs (concurrent marking and sweeping
// on V8's platform threads) run, not only scavenges.
const live = new Array(200000)
let slot = 0
function garbage(n) {
  for (let i = 0; i < n; i++) {
    const o = { i, s: 'k' + i, a: new Array(16).fill(i) }
    live[slot++ % live.length] = o
  }
  return live.length
}

if (!isMainThread) {
  require('./common') // loads the addon here too, as a preload would
  const end = Date.now() + workerData.ms
  let x = 0
  while (Date.now() < end) x += fib(22)
  parentPort.postMessage(x)
} else {
  const { maybeStartSampler, finish } = require('./common')
  const seconds = Number(process.env.BENCH_SECONDS || 4)
  if (process.env.BENCH_PID_FILE) fs.writeFileSync(process.env.BENCH_PID_FILE, String(process.pid))
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(process.env.BENCH_START_DELAY || 0))
  const ms = maybeStartSampler()
  const w = new Worker(__filename, { workerData: { ms: seconds * 1000 } })
  const end = Date.now() + seconds * 1000
  const buf = crypto.randomBytes(1 << 20)
  let pending = 0
  const job = (start) => {
    const again = () => {
      pending--
      if (Date.now() < end) job(start)
    }
    pending++
    start(again)
  }
  for (let i = 0; i < 8; i++) job((cb) => crypto.pbkdf2('pw', 'salt', 20000, 32, 'sha512', cb))
  for (let i = 0; i < 8; i++) job((cb) => zlib.gzip(buf, cb))
  let sink = 0
  const tick = () => {
    if (Date.now() < end) {
      const t = Date.now() + 10
      while (Date.now() < t) {
        sink += fib(18)
        garbage(2000)
      }
      setImmediate(tick)
    } else {
      w.once('message', () => {
        const wait = () => (pending ? setTimeout(wait, 5) : finish(ms, { workload: 'unwind', sink }))
        wait()
      })
    }
  }
  tick()
}
