'use strict'
// Overhead as A/B phases inside one process. A Node process's speed on the
// same JS varies by ±15 % from one process to the next (JIT decisions,
// code placement: fib(34) takes 44 ms in one process and 75 ms in the
// next, on an idle machine), which buries a 1 % effect when each
// configuration runs in its own process. Here the workload runs on, and
// the profilers are switched on and off in short phases, so every
// configuration runs on the same JIT code and is compared with the
// "off" phases around it.
//
// BENCH_WORKLOAD=cpu: the main thread and 3 workers run the kernel of cpu.js.
// BENCH_WORKLOAD=pool: the main thread keeps 8 crypto.pbkdf2 in flight on
// the libuv pool.
// BENCH_PHASES: comma-separated configurations, in the order of one cycle
// (off, ms100, ms1k, v8prof1k, perf1k). BENCH_CYCLES cycles of
// BENCH_PHASE_MS each; the first BENCH_SETTLE_MS of a phase are not
// counted (start()/attach costs are not steady state).
// Prints one JSON line: per phase, ops/s.
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads')
const crypto = require('crypto')
const { kernel, addonPath } = require('./common')

// Shared: [0] stop flag, [1] V8-profiler wanted (0/1), [2 + t] ops of thread t.
const WORDS = 16

function inspectorProfiler() {
  const { Session } = require('inspector')
  const s = new Session()
  s.connect()
  s.post('Profiler.enable')
  s.post('Profiler.setSamplingInterval', { interval: 1000 })
  let on = false
  return (want) => {
    if (want === on) return
    on = want
    if (want) s.post('Profiler.start')
    else s.post('Profiler.stop', () => {})
  }
}

if (!isMainThread) {
  require(addonPath) // as a preload would: this isolate's JS frames get names
  const shared = new Int32Array(workerData.sab)
  const slot = 2 + workerData.index
  const v8prof = inspectorProfiler()
  while (Atomics.load(shared, 0) === 0) {
    v8prof(Atomics.load(shared, 1) === 1)
    for (let k = 0; k < 5; k++) kernel()
    Atomics.add(shared, slot, 5)
  }
  v8prof(false)
  parentPort.postMessage('done')
} else {
  const ms = require(addonPath)
  const { spawn } = require('child_process')
  const workload = process.env.BENCH_WORKLOAD || 'cpu'
  const phases = (process.env.BENCH_PHASES || 'off,ms100,ms1k,v8prof1k').split(',')
  const cycles = Number(process.env.BENCH_CYCLES || 10)
  const phaseMs = Number(process.env.BENCH_PHASE_MS || 500)
  const settleMs = Number(process.env.BENCH_SETTLE_MS || 100)
  const shared = new Int32Array(new SharedArrayBuffer(WORDS * 4))
  const v8prof = inspectorProfiler()
  const workers =
    workload === 'cpu' ? Array.from({ length: Number(process.env.BENCH_WORKERS ?? 3) }, (_, index) => new Worker(__filename, { workerData: { sab: shared.buffer, index: index + 1 } })) : []
  let poolOps = 0
  let poolStop = false
  if (workload === 'pool') {
    const pump = () => {
      if (poolStop) return
      crypto.pbkdf2('password', 'salt', 20000, 32, 'sha256', () => {
        poolOps++
        pump()
      })
    }
    for (let i = 0; i < 8; i++) pump()
  }
  const total = () => {
    let s = poolOps
    for (let i = 2; i < WORDS; i++) s += Atomics.load(shared, i)
    return s
  }
  const tick = () => new Promise((r) => setImmediate(r))
  // Runs the main thread's share of the work for `ms`, yielding to the
  // event loop every ~10 ms (pool callbacks, child processes).
  async function work(msLong) {
    const end = Date.now() + msLong
    while (Date.now() < end) {
      if (workload === 'cpu') {
        const t = Date.now() + 10
        while (Date.now() < t) {
          for (let k = 0; k < 5; k++) kernel()
          Atomics.add(shared, 2, 5)
        }
        await tick()
      } else {
        await new Promise((r) => setTimeout(r, 10))
      }
    }
  }
  let perf = null
  function enter(p) {
    const jsNames = process.env.BENCH_JS_NAMES !== '0'
    if (p === 'ms100') ms.start({ intervalMs: 10, jsNames })
    else if (p === 'ms1k') ms.start({ intervalMs: 1, jsNames })
    else if (p === 'v8prof1k') {
      v8prof(true)
      Atomics.store(shared, 1, 1)
    } else if (p === 'perf1k') {
      perf = spawn('perf', ['record', '-F', '1000', '-g', '-q', '-o', process.env.BENCH_PERF_OUT || '/dev/null', '-p', String(process.pid)], { stdio: 'ignore' })
    }
  }
  async function leave(p) {
    if (p === 'ms100' || p === 'ms1k') ms.stop()
    else if (p === 'v8prof1k') {
      v8prof(false)
      Atomics.store(shared, 1, 0)
    } else if (p === 'perf1k' && perf) {
      const exited = new Promise((r) => perf.once('exit', r))
      perf.kill('SIGINT')
      await exited
      perf = null
    }
  }
  ;(async () => {
    await work(1000) // warm-up: JIT settles, workers start
    const rates = Object.fromEntries(phases.map((p) => [p, []]))
    for (let c = 0; c < cycles; c++) {
      // Rotate, so no configuration always follows the same one.
      const order = phases.map((_, i) => phases[(i + c) % phases.length])
      for (const p of order) {
        enter(p)
        await work(settleMs)
        const [ops0, t0] = [total(), process.hrtime.bigint()]
        await work(phaseMs - settleMs)
        const [ops1, t1] = [total(), process.hrtime.bigint()]
        rates[p].push((ops1 - ops0) / (Number(t1 - t0) / 1e9))
        await leave(p)
      }
    }
    Atomics.store(shared, 0, 1)
    poolStop = true
    await Promise.all(workers.map((w) => new Promise((r) => w.once('message', r))))
    process.stdout.write(JSON.stringify({ workload, phaseMs, settleMs, rates }) + '\n')
    process.exit(0)
  })()
}
