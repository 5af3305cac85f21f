'use strict'
// Measurement, not a crash: the cost of start()/stop() with the V8 layer
// (JS frame naming) on.
//
// With the V8 layer in the working tree on 2026-11-22 (uncommitted:
// control.rs calls v8::enable_code_events() in start() and
// disable_code_events() in stop()), every start() installs V8's JIT code
// event handler with kJitCodeEventEnumExisting on every registered
// isolate, which walks all existing code: synchronously for the calling
// thread's isolate, through an interrupt (holding v8::events' LIFECYCLE
// lock) for the others; stop() takes the same lock to remove it again.
// Measured here: start() 7-10 ms on average (it was 0.2-0.5 ms), up to
// ~60 ms. Under stress/scenarios/start-stop-churn.js (workers busy, a
// worker racing start/stop) a cycle took 58 ms instead of 15 ms and
// start() up to 370 ms, so 10,000 cycles no longer fit the scenario's
// time limit; gdb then showed the main thread in control::stop ->
// v8::events::disable -> lock_contended while a worker held the lock in
// on_interrupt -> SetJitCodeEventHandler -> LogCompiledFunctions.
//
//   node stress/repro/v8-code-events-start-stop-cost.js [functions]
//   MACHSAMPLER_NO_WORKER_HOOK=1 node stress/repro/v8-code-events-start-stop-cost.js
// print start()/stop() latency with an idle worker holding 0 and N
// compiled functions (default 20000).

const { Worker } = require('worker_threads')
const path = require('path')
const ms = require(path.join(__dirname, '..', '..'))

// The worker does not load the addon itself: it is registered (or not)
// only through index.js's Worker hook (MACHSAMPLER_NO_WORKER_HOOK=1 turns
// that off, for comparison).
const WORKER = `
  const { parentPort, workerData } = require('worker_threads')
  const fns = []
  for (let i = 0; i < workerData.functions; i++) {
    const f = new Function('x', 'return x * ' + i + ' + ' + (i % 7))
    f(i)
    fns.push(f)
  }
  const flag = new Int32Array(workerData.flag)
  parentPort.postMessage('ready')
  // Idle in Atomics.wait, which services interrupts.
  while (Atomics.load(flag, 0) === 0) Atomics.wait(flag, 0, 0, 5)
  parentPort.postMessage(fns.length)
`
{
  const n = Number(process.argv[2] || 20000)
  const measure = async (functions) => {
    const flag = new SharedArrayBuffer(4)
    const w = new Worker(WORKER, { eval: true, workerData: { functions, flag } })
    await new Promise((r) => w.once('message', r))
    const start = []
    const stop = []
    for (let i = 0; i < 40; i++) {
      const a = process.hrtime.bigint()
      ms.start({ intervalMs: 1 })
      const b = process.hrtime.bigint()
      const e = Date.now() + 2
      while (Date.now() < e);
      const c = process.hrtime.bigint()
      ms.stop()
      const d = process.hrtime.bigint()
      start.push(Number(b - a) / 1e6)
      stop.push(Number(d - c) / 1e6)
    }
    Atomics.store(new Int32Array(flag), 0, 1)
    await w.terminate()
    const avg = (v) => (v.reduce((x, y) => x + y, 0) / v.length).toFixed(2)
    const max = (v) => Math.max(...v).toFixed(1)
    console.log(`worker with ${String(functions).padStart(6)} functions: start avg ${avg(start)} ms max ${max(start)} ms; stop avg ${avg(stop)} ms max ${max(stop)} ms`)
  }
  ;(async () => {
    const b = require(path.join(__dirname, '..', '..', 'binding.js'))
    console.log(`V8 layer: ${b._jsNamesUnavailable ? (b._jsNamesUnavailable() || 'available') : 'not in this build'}; worker hook ${process.env.MACHSAMPLER_NO_WORKER_HOOK === '1' ? 'off' : 'on'}`)
    await measure(0)
    await measure(n)
  })()
}
