'use strict'
// Thread churn: about 1000 worker_threads a minute are created and
// destroyed while the sampler runs at 1 kHz (stopped and restarted every
// 2 s, alternating CPU and wall mode). The mix: workers that compute and
// return a checked result, workers terminated mid-work, workers that load
// the addon themselves (and query it, try to start it, are terminated
// inside it, or exit with process.exit), and workers that throw. Every
// worker must end the way its kind says, with the right exit code. In CPU
// mode every thread has a CPU-time timer, and threads die with theirs
// armed: the process's timers (/proc/self/timers) are watched all along,
// and timers of exited threads must stay few (they go when the sampler
// next lists threads), none may outlive a session, and no sampling signal
// may arrive after a stop() has returned.

const fs = require('fs')
const { Worker } = require('worker_threads')
const { main, progress } = require('../lib/child')
const { StallWatch } = require('../lib/stall-watch')
const { Sampling, ms } = require('../lib/sampler')
const { rng } = require('../lib/check')
const { ADDON } = require('../lib/proc')

const KINDS = {
  // Sum of i*i for i < n, checked by the parent.
  compute: {
    src: `const { parentPort, workerData } = require('worker_threads')
      let s = 0; for (let i = 0; i < workerData.n; i++) s += i * i
      parentPort.postMessage(s)`,
    exit: 0,
    check: (d, got) => got === (d.n - 1) * d.n * (2 * d.n - 1) / 6,
  },
  // Spins until terminate().
  terminated: {
    src: `const { parentPort } = require('worker_threads'); parentPort.postMessage('spinning'); let x = 0; for (;;) x += Math.sqrt(x + 1)`,
    exit: 1,
    terminateAfterMessage: true,
  },
  // Loads the addon, queries it, exits normally.
  addonQuery: {
    src: `const { parentPort, workerData } = require('worker_threads')
      const ms = require(workerData.addon)
      const r = { running: ms.isRunning(), threads: ms.threadCount(), stats: ms.stats(), unwinding: ms.getNativeUnwinding() }
      let startCode = null
      try { ms.start({ intervalMs: 1 }) ; startCode = 'started' } catch (e) { startCode = e.code }
      if (startCode === 'started') ms.stop() // the main thread was between stop and start
      parentPort.postMessage({ running: typeof r.running, threads: r.threads, captured: typeof r.stats.samplesCaptured, startCode })`,
    exit: 0,
    check: (d, got) => got && got.running === 'boolean' && got.threads > 0 && got.captured === 'number' && (got.startCode === 'EAGAIN' || got.startCode === 'started'),
  },
  // Loads the addon and is terminated while calling into it in a loop.
  addonTerminated: {
    src: `const { parentPort, workerData } = require('worker_threads')
      const ms = require(workerData.addon)
      parentPort.postMessage('looping')
      for (;;) { ms.stats(); ms.isRunning(); ms.threadCount() }`,
    exit: 1,
    terminateAfterMessage: true,
  },
  // Loads the addon and leaves with process.exit() (ends only the worker).
  addonExit: {
    src: `const ms = require(require('worker_threads').workerData.addon); ms.stats(); process.exit(3)`,
    exit: 3,
  },
  // Throws: an 'error' event, exit code 1.
  throws: {
    src: `throw new Error('planned failure')`,
    exit: 1,
    error: 'planned failure',
  },
}
const KIND_NAMES = Object.keys(KINDS)

function taskCount() {
  return fs.readdirSync('/proc/self/task').length
}

main(async (o, c) => {
  const seconds = o.seconds ?? 15
  const perMinute = o.perMinute ?? 1000
  const gapMs = 60000 / perMinute
  const maxAlive = o.maxAlive ?? 8
  const random = rng(o.seed ?? 7)
  const baseline = taskCount()
  // With the stall watcher on, its own sampling keeps timers and signals
  // going after stop(): the quiet check does not apply.
  const sampling = new Sampling(c, { intervalMs: 1, churnMs: o.churnMs ?? 2000, what: 'thread-churn', mode: o.mode ?? 'alternate', quietMs: o.stalls ? 0 : 3 })
  const timerWatch = setInterval(() => sampling.watchTimers(), 25)
  // `stalls`: the stall watcher on for the whole scenario (stress/lib/stall-watch.js).
  const stallWatch = o.stalls ? new StallWatch(c) : null
  const counts = {}
  const inFlight = new Set()
  let created = 0
  const end = Date.now() + seconds * 1000
  const startedAt = Date.now()

  function launch(kindName) {
    const kind = KINDS[kindName]
    const data = { n: 1000 + Math.floor(random() * 50000), addon: ADDON }
    const w = new Worker(kind.src, { eval: true, workerData: data })
    created++
    const born = Date.now()
    let result
    let error = null
    const p = new Promise((resolve) => {
      w.on('message', (m) => {
        result = m
        if (kind.terminateAfterMessage) {
          // Terminate mid-work, after a random few milliseconds.
          setTimeout(() => w.terminate(), Math.floor(random() * 20))
        }
      })
      w.on('error', (e) => {
        error = e
      })
      w.on('exit', (code) => {
        const k = (counts[kindName] ||= { n: 0, ok: 0 })
        k.n++
        let ok = code === kind.exit
        if (ok && kind.check) ok = kind.check(data, result)
        if (ok && kind.error) ok = !!error && String(error.message).includes(kind.error)
        if (ok && !kind.error && error) ok = false
        if (ok) k.ok++
        else c.ok(false, `${kindName} worker: exit ${code} (expected ${kind.exit}), result ${JSON.stringify(result)}, error ${error && error.message}`)
        c.checks++
        progress(`${created} workers`)
        resolve()
      })
    })
    // A worker that never ends is a hang of this scenario.
    const watchdog = setTimeout(() => c.hang(`${kindName} worker still running ${Date.now() - born} ms after creation`), 15000)
    p.then(() => clearTimeout(watchdog))
    inFlight.add(p)
    p.then(() => inFlight.delete(p))
  }

  let i = 0
  while (Date.now() < end) {
    const due = startedAt + created * gapMs
    if (Date.now() < due || inFlight.size >= maxAlive) {
      await Promise.race([new Promise((r) => setTimeout(r, Math.max(1, due - Date.now()))), ...inFlight])
      continue
    }
    launch(KIND_NAMES[i++ % KIND_NAMES.length])
  }
  await Promise.all(inFlight)
  clearInterval(timerWatch)
  sampling.stop()
  if (stallWatch) stallWatch.stop()
  const rate = (created / ((Date.now() - startedAt) / 60000)).toFixed(0)
  c.info.workers = created
  c.info.perMinute = Number(rate)
  c.info.kinds = Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, `${v.ok}/${v.n}`]))
  c.info.sampling = sampling.describe()
  for (const mode of sampling.modes) c.ok(sampling.sessionsByMode[mode] > 0, `no ${mode}-mode session completed`)
  // At most maxAlive workers live at once, so as many timers of exited
  // threads at once means timers are not deleted with their threads.
  sampling.checkTimers(maxAlive)
  c.ok(created >= perMinute * seconds / 60 * 0.6, `only ${created} workers in ${seconds} s (${rate}/min)`)
  // Every worker is gone: no thread was left behind by the sampler.
  await new Promise((r) => setTimeout(r, 300))
  const after = taskCount()
  c.ok(after <= baseline + 2, `threads: ${baseline} before, ${after} after every worker exited`)
  const known = ms.threadCount()
  c.ok(known <= after + 2, `threadCount() says ${known}, /proc/self/task has ${after}`)
  c.info.threadsBeforeAfter = [baseline, after]
})
