'use strict'
// A small program to try machsampler on: about three seconds of CPU work on
// every kind of thread a Node process has.
//
//   npx machsampler record -o demo.html -- node examples/demo.js
//
// - the main thread computes Fibonacci numbers (in slices, so that the
//   event loop still turns and the thread-pool callbacks below run);
// - two worker_threads run a prime sieve;
// - libuv's thread pool hashes passwords (crypto.pbkdf2) and compresses
//   buffers (zlib.deflate), both asynchronous.
//
// Function names are distinct so each kind of work is easy to find in the
// flame graph. DEMO_DURATION_MS changes the run time (default 3000).

const crypto = require('crypto')
const zlib = require('zlib')
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads')

const DURATION_MS = Number(process.env.DEMO_DURATION_MS || 3000)
const WORKERS = 2

// ---- main thread -----------------------------------------------------------

function fibonacciOnMainThread(n) {
  return n < 2 ? n : fibonacciOnMainThread(n - 1) + fibonacciOnMainThread(n - 2)
}

/** Busy for `sliceMs`, then yields to the event loop. */
function mainThreadSlice(sliceMs) {
  const until = Date.now() + sliceMs
  let total = 0
  while (Date.now() < until) total += fibonacciOnMainThread(20)
  return total
}

function yieldToEventLoop() {
  return new Promise((resolve) => setImmediate(resolve))
}

// ---- worker threads ---------------------------------------------------------

function primeSieveInWorker(limit) {
  const composite = new Uint8Array(limit + 1)
  let count = 0
  for (let i = 2; i <= limit; i++) {
    if (composite[i]) continue
    count++
    for (let j = i * i; j <= limit; j += i) composite[j] = 1
  }
  return count
}

function workerMain({ until }) {
  let primes = 0
  while (Date.now() < until) primes += primeSieveInWorker(300000)
  parentPort.postMessage(primes)
}

function startWorker(until) {
  return new Promise((resolve, reject) => {
    const w = new Worker(__filename, { workerData: { until } })
    w.once('message', resolve)
    w.once('error', reject)
  })
}

// ---- libuv thread pool ------------------------------------------------------

/** Keeps pbkdf2 jobs queued on the pool until `until`. */
function hashPasswordsOnThreadPool(until) {
  return new Promise((resolve, reject) => {
    let hashed = 0
    const next = () => {
      if (Date.now() >= until) return resolve(hashed)
      crypto.pbkdf2('correct horse battery staple', 'salt', 20000, 64, 'sha512', (err) => {
        if (err) return reject(err)
        hashed++
        next()
      })
    }
    next()
  })
}

/** Keeps deflate jobs queued on the pool until `until`. */
function compressBuffersOnThreadPool(until) {
  const input = crypto.randomBytes(1 << 20) // incompressible: real work
  return new Promise((resolve, reject) => {
    let compressed = 0
    const next = () => {
      if (Date.now() >= until) return resolve(compressed)
      // One output chunk for the whole buffer: one thread-pool job per call,
      // not one per 16 KiB chunk (each of which waits for the main thread).
      zlib.deflate(input, { level: 6, chunkSize: 2 << 20 }, (err) => {
        if (err) return reject(err)
        compressed++
        next()
      })
    }
    next()
  })
}

// ---- main -------------------------------------------------------------------

async function main() {
  const until = Date.now() + DURATION_MS
  const background = Promise.all([
    ...Array.from({ length: WORKERS }, () => startWorker(until)),
    hashPasswordsOnThreadPool(until),
    hashPasswordsOnThreadPool(until),
    compressBuffersOnThreadPool(until),
  ])
  let fib = 0
  while (Date.now() < until) {
    fib += mainThreadSlice(20)
    await yieldToEventLoop()
  }
  const [w1, w2, hashes, hashes2, deflates] = await background
  console.log(
    `demo: main thread ${fib} fib, workers ${w1 + w2} primes, ` +
      `thread pool ${hashes + hashes2} hashes and ${deflates} deflates`,
  )
}

if (isMainThread) {
  main().catch((e) => {
    console.error(e)
    process.exitCode = 1
  })
} else {
  workerMain(workerData)
}
