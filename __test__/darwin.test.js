'use strict'
// The Mach backend (all threads, rate, dynamic threads, thread exit,
// blocked threads, architecture, suspension time), run in this process
// against the built addon: on macOS, and on Linux against an addon built
// with the simulated Mach (`npm run test:machsim` sets
// MACHSAMPLER_MACHSIM=1 and preloads that addon). JS cannot learn a
// worker's OS thread id on macOS (there is no /proc), so new threads are
// told apart by comparing a profile's thread list with one taken earlier.
const { execFileSync } = require('child_process')
const fs = require('fs')
const net = require('net')
const os = require('os')
const path = require('path')
const { Worker } = require('worker_threads')

const darwin = process.platform === 'darwin'
const machsim = process.platform === 'linux' && process.env.MACHSAMPLER_MACHSIM === '1'
const mach = darwin || machsim
const describeMach = mach ? describe : describe.skip

// Required lazily: on other platforms the suite is skipped and nothing here
// needs the addon.
let m
beforeAll(() => {
  if (mach) m = require('..')
})
afterEach(() => {
  if (m && m.isRunning()) m.stop()
})

function spin(msec) {
  const end = Date.now() + msec
  let x = 0
  while (Date.now() < end) x += Math.sqrt(x + 1)
  return x
}

function sleep(msec) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, msec)
}

const SPIN = `(d) => { const end = Date.now() + d.ms; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1); return x > 0 }`
// Spins until the main thread sets the flag: busy for the whole session,
// however late the worker's "started" message is handled.
const SPIN_UNTIL = `(d) => { const f = new Int32Array(d.flag); let x = 0; while (Atomics.load(f, 0) === 0) x += Math.sqrt(x + 1); return x > 0 }`

/** Workers that spin until `release()`. */
function spinners(n) {
  const flag = new SharedArrayBuffer(4)
  const ws = Array.from({ length: n }, () => runWorker(SPIN_UNTIL, { flag }))
  return { ws, release: () => Atomics.store(new Int32Array(flag), 0, 1) }
}

/** Runs `fn` (function source, called with `data`) in a worker. */
function runWorker(fn, data) {
  const src = `
    const { parentPort, workerData } = require('worker_threads')
    parentPort.postMessage({ started: true })
    Promise.resolve((${fn})(workerData)).then((result) => parentPort.postMessage({ result }))
  `
  const worker = new Worker(src, { eval: true, workerData: data })
  const started = new Promise((resolve) => worker.once('message', resolve))
  const done = new Promise((resolve, reject) => {
    worker.on('message', (msg) => {
      if ('result' in msg) resolve(msg.result)
    })
    worker.once('error', reject)
  })
  const exited = new Promise((resolve) => worker.once('exit', resolve))
  return { worker, started, done, exited }
}

function depthOf(p, node) {
  let d = 0
  for (let n = node; n >= 0; n = p.stacks.parent[n]) d++
  return d
}

/** Per-thread samples (a row stands for `weight` of them) and rows, keyed by tid. */
function perThread(p) {
  const out = new Map()
  for (const t of p.threads) out.set(t.tid, { samples: 0, idle: 0, rows: 0, maxDepth: 0, isMain: t.isMain, name: t.name })
  for (let i = 0; i < p.samples.thread.length; i++) {
    const e = out.get(p.threads[p.samples.thread[i]].tid)
    const w = p.samples.weight[i]
    e.samples += w
    e.rows++
    e.idle += p.samples.idle[i] ? w : 0
    e.maxDepth = Math.max(e.maxDepth, depthOf(p, p.samples.stack[i]))
  }
  return out
}

/**
 * The calling thread's CPU time in ns, measured outside the sampler: Node's
 * own account (23.9+), else the scheduler's (Linux); null on an older Node
 * on macOS.
 */
function threadCpuNs() {
  if (typeof process.threadCpuUsage === 'function') {
    const u = process.threadCpuUsage()
    return (u.user + u.system) * 1000
  }
  try {
    return Number(fs.readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0])
  } catch {
    return null
  }
}

function processCpuNs() {
  const u = process.cpuUsage()
  return (u.user + u.system) * 1000
}

/** The tids a short profile sees: every thread that exists now. */
function currentTids() {
  m.start({ intervalMs: 5 })
  spin(60)
  return new Set(m.stop().threads.map((t) => t.tid))
}

function expectAccounting(p) {
  const s = p.stats
  expect(s.threadsSampled).toBe(s.samplesCaptured + s.samplesDropped)
  expect(s.samplesCaptured).toBe(p.samples.weight.reduce((a, w) => a + w, 0))
}

function translated() {
  if (machsim) return false // the simulation answers the sysctl; see the Rosetta test below
  try {
    return execFileSync('sysctl', ['-n', 'sysctl.proc_translated'], { encoding: 'utf8' }).trim() === '1'
  } catch {
    return false // the OID does not exist on Intel Macs before macOS 11
  }
}

describeMach(`Mach backend (${machsim ? 'simulated Mach on Linux' : 'macOS'})`, () => {
  // Under Rosetta the backend refuses to start, so the sampling scenarios
  // are not registered there; this test checks the refusal instead.
  const rosetta = darwin && translated()

  if (rosetta) {
    test('under Rosetta, start() fails with ENOTSUP and says why (sampling scenarios need native arm64)', () => {
      let err
      try {
        m.start()
      } catch (e) {
        err = e
      }
      expect(err && err.code).toBe('ENOTSUP')
      expect(err.message).toContain('Rosetta')
      expect(m.isRunning()).toBe(false)
    })
    return
  }

  test('the backend is Mach: a capture is synchronous, with no signal delivery time', () => {
    if (machsim) {
      const addon = process.env.NAPI_RS_NATIVE_LIBRARY_PATH
      expect(addon).toBeTruthy()
      expect(process.env.LD_PRELOAD || '').toContain(addon)
      expect(fs.readFileSync('/proc/self/maps', 'utf8')).toContain(addon)
    }
    m.start({ intervalMs: 2 })
    spin(200)
    const p = m.stop()
    expect(p.stats.samplesCaptured).toBeGreaterThan(20)
    // The Linux backend measures signal delivery; Mach has none.
    expect(p.stats.deliveryP50Ns).toBe(0)
    expect(p.stats.deliveryMaxNs).toBe(0)
  })

  if (machsim) {
    test('under (simulated) Rosetta, start() fails with ENOTSUP and says why', () => {
      const src = `const m = require(${JSON.stringify(path.join(__dirname, '..'))});
        try { m.start(); console.log('started') } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })) }`
      const out = execFileSync(process.execPath, ['-e', src], {
        encoding: 'utf8',
        env: { ...process.env, MACHSIM_FAULTS: 'rosetta=1' },
      })
      const err = JSON.parse(out.trim())
      expect(err.code).toBe('ENOTSUP')
      expect(err.message).toContain('Rosetta')
    })

    test('injected Mach errors: suspension failures are skips, state failures walk errors, and nothing leaks', () => {
      const src = `const m = require(${JSON.stringify(path.join(__dirname, '..'))});
        m.start({ intervalMs: 1 }); const end = Date.now() + 400; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1);
        console.log(JSON.stringify(m.stop().stats))`
      const run = (faults) =>
        JSON.parse(
          execFileSync(process.execPath, ['-e', src], {
            encoding: 'utf8',
            env: { ...process.env, MACHSIM_FAULTS: faults },
          }).trim(),
        )
      const suspend = run('thread_suspend=37*20')
      expect(suspend.threadsSkipped).toBeGreaterThanOrEqual(20)
      expect(suspend.walkErrors).toBe(0)
      const state = run('thread_get_state=5*7')
      expect(state.walkErrors).toBe(7)
      const gone = run('thread_get_state=0x10000003*9,thread_info_basic=37*3')
      expect(gone.walkErrors).toBe(0)
      expect(gone.threadsSkipped).toBeGreaterThanOrEqual(12)
      // Each child's sampler thread exit was audited by the simulated
      // kernel (every port right accounted for, no thread left suspended):
      // a failure would have aborted the child and failed execFileSync.
    })
  }

  test('CPU mode (the default): samples stand for the CPU time each thread used (thread_info), blocked threads give none', async () => {
    const before = currentTids()
    const flag = new SharedArrayBuffer(4)
    const waiter = runWorker(`(d) => Atomics.wait(new Int32Array(d.flag), 0, 0) === 'ok'`, { flag })
    await waiter.started
    sleep(100)
    const cpu0 = threadCpuNs()
    const proc0 = processCpuNs()
    m.start({ intervalMs: 5 })
    spin(800)
    const cpu1 = threadCpuNs()
    const proc1 = processCpuNs()
    const p = m.stop()
    Atomics.store(new Int32Array(flag), 0, 1)
    Atomics.notify(new Int32Array(flag), 0)
    expect(await waiter.done).toBe(true)
    expectAccounting(p)
    // The main thread's CPU time, or where Node cannot tell one thread's
    // (macOS before Node 23.9) the process's less the sampler's: the other
    // threads wait meanwhile.
    const cpuNs = cpu0 !== null ? cpu1 - cpu0 : proc1 - proc0 - p.stats.samplerCpuNs
    // However small the share of the cores the main thread got (a fifth on
    // a loaded 2-core machine), its samples stand for it.
    const intervals = cpuNs / 5e6
    expect(intervals).toBeGreaterThan(10)
    const threads = perThread(p)
    const main = [...threads.values()].find((t) => t.isMain)
    expect(Math.abs(main.samples - intervals)).toBeLessThanOrEqual(Math.max(3, intervals * 0.1))
    expect(main.rows).toBeLessThanOrEqual(main.samples)
    // Nothing is idle in CPU mode, and the blocked worker, found after the
    // threads that existed before it, gave its first stack at most (and V8's
    // and libuv's waiting threads likewise).
    expect(p.stats.idleSamples).toBe(0)
    for (const t of threads.values()) expect(t.idle).toBe(0)
    const fresh = [...threads.entries()].filter(([tid]) => !before.has(tid)).map(([, t]) => t)
    expect(fresh.length).toBeGreaterThan(0)
    for (const t of fresh) expect(t.samples).toBeLessThanOrEqual(2)
    expect(p.stats.walkErrors).toBe(0)
  })

  test('wall mode, multithread: the main thread and 4 busy worker_threads are sampled on most ticks', async () => {
    const { ws, release } = spinners(4)
    await Promise.all(ws.map((w) => w.started))
    m.start({ intervalMs: 10, mode: 'wall' })
    spin(1500)
    const p = m.stop()
    release()
    await Promise.all(ws.map((w) => w.done))
    expectAccounting(p)
    const ticks = p.stats.ticks
    // Simulated, a suspension waits for the target to be scheduled, and 6
    // busy threads share 2 cores: fewer ticks run, the shares below hold.
    expect(ticks).toBeGreaterThan(machsim ? 20 : 100)
    const threads = perThread(p)
    const main = [...threads.values()].find((t) => t.isMain)
    expect(main).toBeDefined()
    expect(main.samples).toBeGreaterThan(ticks * 0.8)
    // The main thread plus the four workers ran for most of the session.
    const busy = [...threads.values()].filter((t) => t.samples - t.idle > ticks * 0.5 && t.maxDepth > 5)
    expect(busy.length).toBeGreaterThanOrEqual(5)
    expect(p.stats.walkErrors).toBe(0)
  })

  test('wall mode, rate: within ±10% of 100 Hz over 2 s on an idle main thread, in a few rows', () => {
    m.start({ intervalMs: 10, mode: 'wall' })
    sleep(2000)
    const p = m.stop()
    const main = [...perThread(p).values()].find((t) => t.isMain)
    const expected = Number(p.endTimeNs - p.startTimeNs) / 1e6 / 10
    expect(main.samples / expected).toBeGreaterThan(0.9)
    expect(main.samples / expected).toBeLessThan(1.1)
    // Blocked in Atomics.wait: carried forward without being suspended,
    // the idle samples with the same stack sharing rows.
    expect(main.idle).toBeGreaterThan(main.samples * 0.8)
    expect(main.rows).toBeLessThan(main.samples * 0.2)
    expectAccounting(p)
  })

  test('wall mode, dynamic threads: a worker started after start() is found and sampled', async () => {
    const before = currentTids()
    m.start({ intervalMs: 10, mode: 'wall' })
    sleep(200)
    const w = runWorker(SPIN, { ms: 600 })
    await w.started
    await w.done
    const p = m.stop()
    const threads = perThread(p)
    const fresh = [...threads.entries()].filter(([tid]) => !before.has(tid))
    expect(fresh.length).toBeGreaterThan(0)
    // macOS thread ids only grow, so new threads sort after the old ones.
    for (const [tid] of fresh) expect(tid).toBeGreaterThan(Math.max(...before))
    // The spinning worker: 600 ms at 10 ms, running.
    const worker = fresh.map(([, t]) => t).find((t) => t.samples > 30 && t.samples - t.idle > 20)
    expect(worker).toBeDefined()
  })

  test.each(['cpu', 'wall'])('%s mode, thread termination: exits during 1 kHz sampling are skipped, never walk errors', async (mode) => {
    m.start({ intervalMs: 1, mode })
    let batch = []
    for (let i = 0; i < 60; i++) {
      const w = runWorker(SPIN, { ms: 5 + (i % 7) * 7 })
      batch.push(w.exited)
      if (batch.length >= 6) {
        await Promise.all(batch)
        batch = []
      }
    }
    await Promise.all(batch)
    const p = m.stop()
    expectAccounting(p)
    expect(p.threads.length).toBeGreaterThanOrEqual(60)
    // Wall mode asks for every thread that ran since the last tick, some of
    // them gone by then; CPU mode only for those that used an interval.
    if (mode === 'wall') expect(p.stats.threadsSkipped).toBeGreaterThan(0)
    expect(p.stats.walkErrors).toBe(0)
    // The exited threads are no longer counted.
    expect(m.threadCount()).toBeLessThan(p.threads.length)
  })

  test('wall mode, blocked threads: a worker blocked in a FIFO read and one in socket I/O appear, and their I/O completes', async () => {
    const fifo = path.join(os.tmpdir(), `machsampler-fifo-${process.pid}`)
    execFileSync('mkfifo', [fifo])
    try {
      const before = currentTids()
      const reader = runWorker(
        `(d) => { const fs = require('fs'); const fd = fs.openSync(d.fifo, 'r'); const b = Buffer.alloc(64); const n = fs.readSync(fd, b, 0, 64, null); fs.closeSync(fd); return b.toString('utf8', 0, n) }`,
        { fifo },
      )
      await reader.started
      const server = net.createServer((s) => s.pipe(s))
      await new Promise((r) => server.listen(0, '127.0.0.1', r))
      // Wall mode: waiting threads show, carried forward as idle.
      m.start({ intervalMs: 1, mode: 'wall' })
      const echo = runWorker(
        `async (d) => {
          const net = require('net')
          const s = net.connect(d.port, '127.0.0.1')
          await new Promise((r) => s.once('connect', r))
          let ok = 0
          for (let i = 0; i < 200; i++) {
            const msg = 'message-' + i + '-' + 'x'.repeat(i)
            const got = await new Promise((r) => { let acc = ''; const on = (c) => { acc += c; if (acc.length >= msg.length) { s.off('data', on); r(acc) } }; s.on('data', on); s.write(msg) })
            if (got === msg) ok++
          }
          s.end()
          return ok
        }`,
        { port: server.address().port },
      )
      sleep(600)
      const fd = fs.openSync(fifo, 'w')
      fs.writeSync(fd, 'hello from the writer')
      fs.closeSync(fd)
      const [read, echoed] = await Promise.all([reader.done, echo.done])
      const p = m.stop()
      server.close()
      expect(read).toBe('hello from the writer')
      expect(echoed).toBe(200)
      expectAccounting(p)
      // The reader's thread is among those created after `before`; it was
      // blocked for >= 600 ms at 1 ms, so it has well over 100 samples,
      // mostly carried forward as idle.
      const threads = perThread(p)
      const blocked = [...threads.entries()].filter(
        ([tid, t]) => !before.has(tid) && t.samples > 100 && t.idle > t.samples / 2,
      )
      expect(blocked.length).toBeGreaterThan(0)
      expect(p.stats.walkErrors).toBe(0)
    } finally {
      fs.rmSync(fifo, { force: true })
    }
  })

  test('architecture: native frames are untagged code addresses; JS frames are named frames', () => {
    expect(['arm64', 'x64']).toContain(process.arch)
    const recurse = (n) => (n === 0 ? spin(300) : recurse(n - 1) + 1)
    // Native frames only: every frame is a pc or a return address.
    m.start({ intervalMs: 2, jsNames: false })
    recurse(50)
    const p = m.stop()
    const addrs = Array.from(p.frames.address).filter((a) => a !== 0n)
    expect(addrs.length).toBeGreaterThan(20)
    // User-space addresses are below 2^47 on both architectures; any higher
    // bit set would be a pointer-authentication tag left in.
    for (const a of addrs) expect(a < 1n << 47n).toBe(true)
    const unaligned = addrs.filter((a) => a % 4n !== 0n).length
    if (process.arch === 'arm64') {
      // A64 instructions are 4-byte aligned: every pc and return address.
      expect(unaligned).toBe(0)
    } else {
      // x86-64 instructions have any length: return addresses land anywhere.
      expect(unaligned).toBeGreaterThan(0)
    }
    expect(p.stats.walkErrors).toBe(0)

    // With JavaScript names (the default), a JS frame is TAGGED (bit 63)
    // plus an index into the session's names, and an interpreted frame
    // V8's map did not know stays a bytecode address (on the V8 heap, any
    // alignment): neither is a code address, so only the untagged ones
    // must be user-space addresses.
    m.start({ intervalMs: 2 })
    recurse(50)
    const q = m.stop()
    const all = Array.from(q.frames.address).filter((a) => a !== 0n)
    const tagged = all.filter((a) => a >= 1n << 63n)
    expect(tagged.length).toBeGreaterThan(0)
    for (const a of all) expect(a < 1n << 47n || a >= 1n << 63n).toBe(true)
    const named = q.symbols || m.symbolicate(q)
    expect(named.functions.name.some((n) => n && n.includes('recurse'))).toBe(true)
    expect(q.stats.walkErrors).toBe(0)
  })

  test('suspension: p99 under 100 µs with 4 busy workers at 1 kHz', async () => {
    const { ws, release } = spinners(4)
    await Promise.all(ws.map((w) => w.started))
    m.start({ intervalMs: 1 })
    spin(1000)
    const p = m.stop()
    release()
    await Promise.all(ws.map((w) => w.done))
    const s = p.stats
    expect(s.samplesCaptured).toBeGreaterThan(machsim ? 200 : 1000)
    expect(s.totalSuspendNs).toBeGreaterThan(0)
    expect(s.maxSuspendNs).toBeGreaterThan(0)
    if (machsim) {
      // A simulated suspension waits until the target thread runs its park
      // handler, a scheduler round trip when 6 threads share 2 cores (see
      // docs/design/mach-simulation.md): the bound is the simulation's.
      expect(s.suspendP99Ns).toBeLessThan(50_000_000)
    } else {
      expect(s.suspendP99Ns).toBeLessThan(100_000)
    }
    expect(s.suspendP50Ns).toBeLessThanOrEqual(s.suspendP99Ns)
  })
})

if (!mach) {
  test(`Mach suite skipped: it runs on macOS, and on Linux under npm run test:machsim (platform here: ${process.platform})`, () => {
    expect(mach).toBe(false)
  })
}
