'use strict'
// Allocation storm: 8 worker_threads and the main thread hammer malloc and
// free (Buffer allocations, big JSON) while the sampler runs at 1 kHz and
// is stopped and restarted every second, alternating CPU mode (each
// thread's CPU timer interrupts it) and wall mode (the sampler thread
// signals it). Run with MACHSAMPLER_ALLOC_CHECK=1: if the signal handler
// allocated while a thread is stopped (possibly holding the malloc lock),
// the addon aborts (a crash here). A deadlock in malloc shows as a worker
// or the whole process making no progress for 5 s (a hang). Every
// allocation's content and every JSON round trip is checked, every worker
// must be sampled busy in both modes, and in CPU mode each thread's
// samples must match its CPU time.

const { Worker } = require('worker_threads')
const { main, progress } = require('../lib/child')
const { StallWatch } = require('../lib/stall-watch')
const { Sampling } = require('../lib/sampler')

const WORKER = `
const { parentPort, workerData } = require('worker_threads')
const fs = require('fs')
const tid = Number(fs.readlinkSync('/proc/thread-self').split('/').pop())
const end = Date.now() + workerData.ms
let n = 0, bad = 0, bytes = 0, lastPost = 0
function work(k) {
  // Buffers of every size class, zero-filled and unsafe.
  const size = 1 + ((k * 7919) % 65536)
  const b = Buffer.alloc(size, k & 255)
  if (b.length !== size || b[size - 1] !== (k & 255) || b[0] !== (k & 255)) bad++
  const u = Buffer.allocUnsafe(4096 + (k % 8192)).fill(k % 251)
  if (u[u.length - 1] !== k % 251) bad++
  bytes += size + u.length
  // A big JSON document round trip.
  const items = []
  for (let i = 0; i < 400; i++) items.push({ i, v: i * 3 + k, s: 'x'.repeat(i % 40), nested: { a: [i, k, String(i)] } })
  const text = JSON.stringify({ k, items })
  const back = JSON.parse(text)
  if (back.k !== k || back.items.length !== 400 || back.items[399].v !== 399 * 3 + k || back.items[7].nested.a[2] !== '7') bad++
  if (k % 64 === 0 && JSON.stringify(back) !== text) bad++
}
while (Date.now() < end) {
  work(n++)
  const now = Date.now()
  if (now - lastPost >= 100) { lastPost = now; parentPort.postMessage({ tid, n, bad, bytes }) }
}
parentPort.postMessage({ tid, n, bad, bytes, done: true })
`

main(async (o, c) => {
  const seconds = o.seconds ?? 10
  const threads = o.threads ?? 8
  const ms = seconds * 1000
  const state = []
  const workers = []
  // With the stall watcher on, its own sampling keeps timers and signals
  // going after stop(): the quiet check does not apply.
  const sampling = new Sampling(c, { intervalMs: 1, churnMs: o.churnMs ?? 1000, what: 'alloc-storm', mode: o.mode ?? 'alternate', quietMs: o.stalls ? 0 : 3 })
  // `stalls`: the stall watcher on for the whole scenario (stress/lib/stall-watch.js).
  const stallWatch = o.stalls ? new StallWatch(c) : null
  for (let i = 0; i < threads; i++) {
    const w = new Worker(WORKER, { eval: true, workerData: { ms } })
    const s = { tid: null, n: 0, bad: 0, bytes: 0, done: false, last: Date.now(), exit: null }
    state.push(s)
    w.on('message', (m) => {
      Object.assign(s, m)
      s.last = Date.now()
      progress(`worker ${i}: ${m.n} rounds`)
    })
    w.on('error', (e) => c.ok(false, `worker ${i} error: ${e.stack || e}`))
    workers.push(new Promise((r) => w.on('exit', (code) => r((s.exit = code)))))
  }
  // The main thread allocates too, in slices so it can read the workers'
  // messages and watch for stalls.
  const end = Date.now() + ms
  let mainRounds = 0
  let stalled = false
  while (Date.now() < end) {
    const slice = Date.now() + 20
    while (Date.now() < slice) {
      const b = Buffer.alloc(2048 + (mainRounds % 30000), 7)
      const j = JSON.parse(JSON.stringify({ b: b.length, r: mainRounds, a: new Array(50).fill(mainRounds) }))
      if (j.b !== b.length || j.a[49] !== mainRounds || b[b.length - 1] !== 7) c.ok(false, `main thread round ${mainRounds} wrong`)
      mainRounds++
    }
    progress(`main: ${mainRounds} rounds`)
    await new Promise((r) => setImmediate(r))
    for (let i = 0; i < state.length; i++) {
      if (!state[i].done && Date.now() - state[i].last > 5000 && !stalled) {
        stalled = true
        c.hang(`worker ${i} (tid ${state[i].tid}) made no progress for 5 s after ${state[i].n} rounds`)
      }
    }
    if (stalled) return
  }
  const codes = await Promise.all(workers)
  sampling.stop()
  if (stallWatch) stallWatch.stop()
  c.eq(codes, codes.map(() => 0), 'worker exit codes')
  for (let i = 0; i < state.length; i++) {
    const s = state[i]
    c.ok(s.done, `worker ${i} did not finish`)
    c.eq(s.bad, 0, `worker ${i}: wrong allocation or JSON results`)
    c.ok(s.n > 10, `worker ${i} did only ${s.n} rounds`)
    // (Not under valgrind, which runs one thread at a time and takes a few
    // dozen samples in all.)
    if (o.checkBusy !== false) {
      for (const mode of sampling.modes) {
        c.ok((sampling.busyByMode[mode].get(s.tid) || 0) > 0, `worker ${i} (tid ${s.tid}) never appears busy in a ${mode}-mode profile`)
      }
    }
  }
  // CPU mode: every thread that computed through whole sessions (the
  // workers, the main thread) got samples for its CPU time.
  if (o.checkBusy !== false) c.info.cpuMode = sampling.checkCpu({ minIntervals: 200 })
  c.info.rounds = state.reduce((a, s) => a + s.n, mainRounds)
  c.info.allocatedGB = +(state.reduce((a, s) => a + s.bytes, 0) / 1e9).toFixed(1)
  c.info.sampling = sampling.describe()
})
