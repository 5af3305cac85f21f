'use strict'
// For fidelity and unwind figures: zlib and OpenSSL on the main thread, a
// JS-heavy worker, and the libuv pool, for BENCH_SECONDS. Writes its pid to
// BENCH_PID_FILE and waits BENCH_START_DELAY ms first (so perf can attach).
const fs = require('fs')
const zlib = require('zlib')
const crypto = require('crypto')
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads')

function fib(n) {
  return n < 2 ? n : fib(n - 1) + fib(n - 2)
}

if (!isMainThread) {
  require('./common') // loads the addon here too, as a preload would
  const end = Date.now() + workerData.ms
  let x = 0
  while (Date.now() < end) x += fib(20)
  parentPort.postMessage(x)
} else {
  const { maybeStartSampler, finish } = require('./common')
  const seconds = Number(process.env.BENCH_SECONDS || 4)
  if (process.env.BENCH_PID_FILE) fs.writeFileSync(process.env.BENCH_PID_FILE, String(process.pid))
  const delay = Number(process.env.BENCH_START_DELAY || 0)
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, delay)
  const ms = maybeStartSampler()
  const w = new Worker(__filename, { workerData: { ms: seconds * 1000 } })
  const buf = crypto.randomBytes(1 << 19)
  let pending = 0
  const end = Date.now() + seconds * 1000
  const poolLoop = () => {
    if (Date.now() >= end) return
    pending++
    crypto.pbkdf2('pw', 'salt', 50000, 32, 'sha512', () => {
      pending--
      poolLoop()
    })
  }
  poolLoop()
  poolLoop()
  const tick = () => {
    if (Date.now() < end) {
      const t = Date.now() + 20
      while (Date.now() < t) {
        zlib.deflateSync(buf)
        crypto.createHash('sha256').update(buf).digest()
      }
      setImmediate(tick)
    } else {
      w.once('message', () => {
        const wait = () => (pending ? setTimeout(wait, 5) : finish(ms, { workload: 'mixed', mainTid: Number(fs.readlinkSync('/proc/thread-self').split('/').pop()) }))
        wait()
      })
    }
  }
  tick()
}
