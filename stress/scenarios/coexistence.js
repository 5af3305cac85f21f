'use strict'
// Coexistence with other profilers and with itself, each in a fresh
// process sampling at 1 kHz with worker_threads busy, in CPU mode and in
// wall mode:
// - `node --cpu-prof` (V8's CPU profiler, SIGPROF-driven on Linux);
// - `node --prof` (V8's tick profiler, also SIGPROF);
// - the inspector's Profiler domain (Profiler.start/stop), in the main
//   thread and in a worker, interleaved with start()/stop() every way;
// - a second copy of the addon loaded from another path: both copies
//   sample, each on its own signal, in every start/stop order and every
//   mode pairing, and neither leaves a signal behind after its stop();
// - `perf record -g` around the whole process, and `perf record -p`
//   attached to a running one.
// Neither side may hang. Each side's samples are judged by what they
// stand for: V8's and perf's must be there; machsampler's by its mode
// (cpu.js judge(): in CPU mode each busy thread's CPU time / interval,
// whatever share of a core it got; in wall mode about one per tick).

const fs = require('fs')
const path = require('path')
const { spawn, spawnSync } = require('child_process')
const { main, progress } = require('../lib/child')
const { runNode, run, describe, tmpdir, ROOT, ADDON } = require('../lib/proc')
const { delay } = require('../lib/check')
const { judge } = require('../lib/cpu')

const LIB = path.join(__dirname, '..', 'lib')
const lib = (f) => JSON.stringify(path.join(LIB, f))

/**
 * An app that samples at 1 kHz in `mode` for `seconds` with 2 busy workers
 * and prints a JSON line: the profile's consistency and its CPU account.
 * The workers outlive the session, so their CPU time is measured to its end.
 */
function app(seconds, mode, extra = '') {
  return `
const ms = require(${JSON.stringify(ADDON)})
const { checkProfile } = require(${lib('check.js')})
const { cpuWindow, account } = require(${lib('cpu.js')})
const { Worker } = require('worker_threads')
const ws = [0, 1].map(() => new Worker('const e = Date.now() + ${seconds * 1000 + 1500}; let x = 0; while (Date.now() < e) x += JSON.stringify({ x }).length', { eval: true }))
const win = cpuWindow()
ms.start({ intervalMs: 1, mode: '${mode}' })
${mode === 'cpu' ? 'win.armed()' : ''}
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }
const end = Date.now() + ${seconds * 1000}
let x = 0
while (Date.now() < end) x += fib(18)
${extra}
const p = ms.stop()
const acc = account(p, win.end())
Promise.all(ws.map((w) => new Promise((r) => w.on('exit', r)))).then(() => {
  console.log(JSON.stringify({ samples: p.stats.samplesCaptured, consistent: checkProfile(p, { mode: '${mode}' }), acc, pid: process.pid }))
})
`
}

/** Checks an app()'s line: consistent, and samples for what the busy threads did. */
function judgeApp(c, what, out, mode) {
  c.samples += out.samples
  c.eq(out.consistent, 'ok', `${what}: machsampler's profile`)
  for (const m of judge(out.acc, mode)) c.ok(false, `${what}: ${m}`)
  c.checks++
  // The main thread and both workers were busy through the session.
  c.ok(out.acc.threads.filter((t) => t.whole && t.intervals >= 100).length >= 3, `${what}: fewer than 3 busy threads in ${JSON.stringify(out.acc.threads.map((t) => [t.comm, Math.round(t.intervals)]))}`)
}

function lastJson(stdout) {
  try {
    return JSON.parse(stdout.trim().split('\n').pop())
  } catch {
    return null
  }
}

// Each session reports, for the thread it ran on: a cpu.js account of
// that one thread (machsampler's busy and idle samples, its CPU intervals,
// the session's ticks), V8's sample count and whether V8 saw fib().
const INSPECTOR_APP = (seconds, mode) => `
const ms = require(${JSON.stringify(ADDON)})
const fs = require('fs')
const inspector = require('inspector')
const { cpuWindow, account } = require(${lib('cpu.js')})
const { Worker, isMainThread, parentPort } = require('worker_threads')
const tid = Number(fs.readlinkSync('/proc/thread-self').split('/').pop())
function post(s, m, p) { return new Promise((res, rej) => s.post(m, p || {}, (e, r) => (e ? rej(e) : res(r)))) }
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }
async function spinAsync(ms_) { const end = Date.now() + ms_; while (Date.now() < end) { fib(15); await new Promise((r) => setImmediate(r)) } }
let win
function startMine() { win = cpuWindow(); ms.start({ intervalMs: 1, mode: '${mode}' }); ${mode === 'cpu' ? 'win.armed()' : ''} }
function stopMine() { const p = ms.stop(); const acc = account(p, win.end()); return { ...acc, samples: p.stats.samplesCaptured, threads: acc.threads.filter((t) => t.tid === tid) } }
function v8Saw(profile) { return { samples: profile.samples.length, fib: profile.nodes.some((n) => n.callFrame.functionName === 'fib') } }
async function profileWith(order, ms_) {
  const s = new inspector.Session(); s.connect()
  await post(s, 'Profiler.enable')
  await post(s, 'Profiler.setSamplingInterval', { interval: 100 })
  const steps = { ms: startMine, v8: () => post(s, 'Profiler.start') }
  const stops = { ms: stopMine, v8: () => post(s, 'Profiler.stop') }
  let mine, theirs
  for (const k of order.start) await steps[k]()
  await spinAsync(ms_)
  for (const k of order.stop) { const r = await stops[k](); if (k === 'ms') mine = r; else theirs = r.profile }
  s.disconnect()
  return { machsampler: mine, v8: v8Saw(theirs) }
}
const ORDERS = [
  { start: ['ms', 'v8'], stop: ['ms', 'v8'] },
  { start: ['v8', 'ms'], stop: ['ms', 'v8'] },
  { start: ['ms', 'v8'], stop: ['v8', 'ms'] },
  { start: ['v8', 'ms'], stop: ['v8', 'ms'] },
]
if (isMainThread) {
  (async () => {
    const main = []
    for (const o of ORDERS) main.push(await profileWith(o, ${seconds * 250}))
    // The inspector Profiler inside a worker, while the worker samples.
    const w = new Worker(__filename)
    const inWorker = await new Promise((r) => w.once('message', r))
    console.log(JSON.stringify({ main, inWorker }))
  })().catch((e) => { console.error(e); process.exit(1) })
} else {
  (async () => {
    const s = new inspector.Session(); s.connect()
    await post(s, 'Profiler.enable')
    await post(s, 'Profiler.start')
    startMine()
    await spinAsync(${seconds * 300})
    const mine = stopMine()
    const theirs = (await post(s, 'Profiler.stop')).profile
    parentPort.postMessage({ machsampler: mine, v8: v8Saw(theirs) })
  })()
}
`

/** Copies the loadable package (addon, loader, index) to another directory. */
function copyAddon(dir) {
  // This platform's build (the macOS builds may sit beside it).
  const node = fs.readdirSync(ROOT).find((f) => f.startsWith(`machsampler.${process.platform}-${process.arch}`) && f.endsWith('.node'))
  for (const f of [node, 'binding.js', 'index.js', 'package.json']) fs.copyFileSync(path.join(ROOT, f), path.join(dir, f))
  fs.cpSync(path.join(ROOT, 'lib'), path.join(dir, 'lib'), { recursive: true })
  return dir
}

// Both copies at once, in every start/stop order, for each pairing of
// modes. Each session reports both profiles' consistency and CPU accounts;
// after both stops, both copies' signals are watched for 3 ms.
const TWO_COPIES_APP = (copy, seconds) => `
const fs = require('fs')
const { caughtSignals, countSignals } = require(${lib('probe.js')})
const { checkProfile } = require(${lib('check.js')})
const { cpuWindow, account, taskCpu } = require(${lib('cpu.js')})
const before = caughtSignals()
const a = require(${JSON.stringify(ADDON)})
const b = require(${JSON.stringify(copy)})
const { Worker } = require('worker_threads')
const ws = [0, 1].map(() => new Worker('let x = 0; for (;;) x += Math.sqrt(x + 1)', { eval: true }))
const spin = (ms) => { const e = Date.now() + ms; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1) }
const out = { distinct: a.start !== b.start, sessions: [] }
setTimeout(() => {
  // Which copy took which signal: a starts first, alone.
  a.start({ intervalMs: 1 }); a.stop()
  const sigA = [...caughtSignals()].filter((s) => !before.has(s))
  b.start({ intervalMs: 1 }); b.stop()
  const sigB = [...caughtSignals()].filter((s) => !before.has(s) && !sigA.includes(s))
  out.signals = { a: sigA, b: sigB }
  const copies = { a, b }
  for (const [ma, mb] of [['cpu', 'cpu'], ['wall', 'wall'], ['cpu', 'wall']]) {
    const modes = { a: ma, b: mb }
    for (const [s1, s2, t1, t2] of [['a', 'b', 'a', 'b'], ['a', 'b', 'b', 'a'], ['b', 'a', 'a', 'b'], ['b', 'a', 'b', 'a']]) {
      const win = cpuWindow()
      copies[s1].start({ intervalMs: 1, mode: modes[s1] }); copies[s2].start({ intervalMs: 1, mode: modes[s2] })
      const cpuCopies = [ma, mb].filter((m) => m === 'cpu').length
      if (cpuCopies) win.armed({ count: cpuCopies })
      spin(${seconds * 250})
      // Each copy's window ends when its own stop() returns: the CPU the
      // calling thread spends in the other copy's stop() after that is not
      // this copy's to sample.
      const p = {}
      const ends = {}
      p[t1] = copies[t1].stop()
      ends[t1] = taskCpu()
      p[t2] = copies[t2].stop()
      ends[t2] = taskCpu()
      const q = countSignals([...sigA, ...sigB], () => spin(3))
      const one = (k) => ({ mode: modes[k], consistent: checkProfile(p[k], { mode: modes[k] }), samples: p[k].stats.samplesCaptured, acc: account(p[k], { ...win, after: ends[k] }) })
      out.sessions.push({ order: [s1, s2, t1, t2].join(''), a: one('a'), b: one('b'), lateSignals: q })
    }
  }
  // Interleaved churn of the two copies, modes alternating.
  let cycles = 0
  for (let i = 0; i < 100; i++) {
    const x = i % 2 ? a : b, y = i % 2 ? b : a
    const mode = i % 4 < 2 ? 'cpu' : 'wall'
    x.start({ intervalMs: 1, mode }); spin(1); y.start({ intervalMs: 1, mode }); spin(1); x.stop(); y.stop(); cycles++
  }
  out.cycles = cycles
  out.running = [a.isRunning(), b.isRunning()]
  Promise.all(ws.map((w) => w.terminate())).then(() => console.log(JSON.stringify(out)))
}, 100)
`

main(async (o, c) => {
  const seconds = o.seconds ?? 2
  const node = o.node || process.execPath
  const dir = tmpdir('coexist')

  // --cpu-prof, in each mode.
  c.info.cpuProf = {}
  for (const mode of ['cpu', 'wall']) {
    const profDir = path.join(dir, `cpuprof-${mode}`)
    const r = await runNode(app(seconds, mode), { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval', '100'], timeoutMs: 60000, node })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `--cpu-prof (${mode} mode): ${describe(r)}`)
    if (out) judgeApp(c, `--cpu-prof (${mode} mode)`, out, mode)
    const files = fs.existsSync(profDir) ? fs.readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile')) : []
    c.ok(files.length >= 1, `--cpu-prof (${mode} mode) wrote no .cpuprofile`)
    let v8Samples = 0
    for (const f of files) {
      try {
        v8Samples += JSON.parse(fs.readFileSync(path.join(profDir, f), 'utf8')).samples.length
      } catch (e) {
        c.ok(false, `--cpu-prof: ${f} does not parse: ${e.message}`)
      }
    }
    // V8's profiler samples wall time: thousands in 2 s at 100 us.
    c.ok(v8Samples > 100, `--cpu-prof (${mode} mode): V8's profile has only ${v8Samples} samples`)
    c.info.cpuProf[mode] = { machsampler: out && out.samples, v8: v8Samples, files: files.length }
  }

  // --prof (V8's tick profiler), wall mode.
  {
    const log = path.join(dir, 'v8.log')
    const r = await runNode(app(seconds, 'wall'), { nodeArgs: ['--prof', `--logfile=${log}`, '--no-logfile-per-isolate'], timeoutMs: 60000, node })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `--prof: ${describe(r)}`)
    if (out) judgeApp(c, '--prof (wall mode)', out, 'wall')
    const ticks = fs.existsSync(log) ? (fs.readFileSync(log, 'utf8').match(/^tick,/gm) || []).length : 0
    c.ok(ticks > 100, `--prof: only ${ticks} ticks in V8's log`)
    c.info.prof = { machsampler: out && out.samples, v8Ticks: ticks }
  }

  // The inspector Profiler, in-process, in each mode. Each side is judged
  // by its own clock: V8 samples wall time at 100 us and must have seen
  // fib(); machsampler's samples of the thread by its mode.
  c.info.inspector = {}
  for (const mode of ['cpu', 'wall']) {
    const r = await runNode(INSPECTOR_APP(seconds, mode), { timeoutMs: 60000, node })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `inspector Profiler (${mode} mode): ${describe(r)}`)
    if (!out) continue
    const sessions = [...out.main.map((m, i) => [`order ${i}`, m]), ['in a worker', out.inWorker]]
    for (const [what, m] of sessions) {
      c.samples += m.machsampler.samples
      for (const p of judge(m.machsampler, mode, { busy: () => true })) c.ok(false, `inspector Profiler (${mode} mode), ${what}: ${p}`)
      c.checks++
      c.ok(m.v8.samples > 50 && m.v8.fib, `inspector Profiler (${mode} mode), ${what}: V8 took ${m.v8.samples} samples${m.v8.fib ? '' : ' and never saw fib()'}`)
    }
    c.info.inspector[mode] = sessions.map(([what, m]) => `${what}: ${m.machsampler.threads[0].busy}/${Math.round(m.machsampler.threads[0].intervals)} ms CPU, V8 ${m.v8.samples}`)
  }

  // A second copy of the addon from another path.
  {
    const copy = copyAddon(fs.mkdtempSync(path.join(dir, 'copy-')))
    const r = await runNode(TWO_COPIES_APP(copy, seconds), { timeoutMs: 90000, node })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `two copies: ${describe(r)}`)
    if (out) {
      c.ok(out.distinct, 'two copies: the second path loaded the same module')
      // Each on its own signal.
      const { a: sa, b: sb } = out.signals
      c.ok(sa.length === 1 && sb.length === 1 && sa[0] !== sb[0], `two copies: one new signal handler each, different ones (${JSON.stringify(out.signals)})`)
      for (const s of out.sessions) {
        const what = `two copies, ${s.a.mode}/${s.b.mode} mode, order ${s.order}`
        for (const k of ['a', 'b']) {
          c.samples += s[k].samples
          c.eq(s[k].consistent, 'ok', `${what}: copy ${k}'s profile`)
          for (const p of judge(s[k].acc, s[k].mode, { minIntervals: 30 })) c.ok(false, `${what}: copy ${k}: ${p}`)
          c.checks++
        }
        // In CPU mode both copies count the same CPU clocks: close counts.
        if (s.a.mode === 'cpu' && s.b.mode === 'cpu') {
          const na = s.a.acc.threads.reduce((x, t) => x + t.busy, 0)
          const nb = s.b.acc.threads.reduce((x, t) => x + t.busy, 0)
          c.ok(Math.abs(na - nb) <= 0.15 * Math.max(na, nb) + 10, `${what}: copy a took ${na} samples, copy b ${nb}, of the same threads' CPU time`)
        }
        const late = () => `${what}: ${s.lateSignals.count} sampling signal(s) after both stop()s returned (${s.lateSignals.timer} from timers, ${s.lateSignals.queued} queued)`
        c.ok(s.lateSignals.count === 0, late)
      }
      c.eq(out.sessions.length, 12, 'two copies: sessions')
      c.eq(out.cycles, 100, 'two copies: interleaved start/stop cycles')
      c.eq(out.running, [false, false], 'two copies: both stopped at the end')
      c.info.twoCopies = {
        signals: out.signals,
        samples: out.sessions.map((s) => `${s.a.mode}/${s.b.mode} ${s.order}: ${s.a.samples}/${s.b.samples}`),
      }
    }
  }

  // perf record around the process (CPU mode), and attached to one (wall mode).
  const perfOk = spawnSync('perf', ['--version'], { encoding: 'utf8' }).status === 0
  c.ok(perfOk, 'perf is not installed (apt-get install linux-perf)')
  if (perfOk) {
    const data = path.join(dir, 'perf.data')
    const file = path.join(dir, 'perf-app.js')
    fs.writeFileSync(file, app(seconds, 'cpu'))
    const r = await run('perf', ['record', '-q', '-F', '999', '-g', '-o', data, '--', node, file], { timeoutMs: 90000, note: 'perf record' })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `perf record -- node: ${describe(r)}`)
    if (out) judgeApp(c, 'perf record -- node (CPU mode)', out, 'cpu')
    const perfSamples = countPerfSamples(data)
    c.ok(perfSamples > 100, `perf record -- node: perf recorded ${perfSamples} samples`)

    // Attached with -p to a process already sampling.
    const data2 = path.join(dir, 'perf-attach.data')
    const longFile = path.join(dir, 'perf-app-long.js')
    fs.writeFileSync(longFile, app(seconds + 3, 'wall'))
    const target = spawn(node, [longFile], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    target.stdout.on('data', (d) => (stdout += d))
    const exited = new Promise((res) => target.on('exit', (code, signal) => res({ code, signal })))
    await delay(800)
    const p = await run('perf', ['record', '-q', '-F', '999', '-g', '-p', String(target.pid), '-o', data2, '--', 'sleep', String(seconds)], { timeoutMs: 60000, note: 'perf record -p' })
    c.ok(p.code === 0, `perf record -p: ${describe(p)}`)
    const t = await Promise.race([exited, delay(60000).then(() => null)])
    if (!t) target.kill('SIGKILL')
    c.ok(t && t.code === 0, `a process with perf attached: ${t ? `exit ${t.code} ${t.signal}` : 'hung'}`)
    const out2 = lastJson(stdout)
    c.ok(out2, `a process with perf attached printed nothing`)
    if (out2) judgeApp(c, 'perf record -p (wall mode)', out2, 'wall')
    const perfSamples2 = countPerfSamples(data2)
    c.ok(perfSamples2 > 100, `perf record -p: perf recorded ${perfSamples2} samples`)
    c.info.perf = { machsampler: out && out.samples, perf: perfSamples, attached: { machsampler: out2 && out2.samples, perf: perfSamples2 } }
  }
  progress('done')
  fs.rmSync(dir, { recursive: true, force: true })
})

/** Samples in a perf.data file: one line each from perf script. */
function countPerfSamples(file) {
  if (!fs.existsSync(file)) return 0
  const s = spawnSync('perf', ['script', '-i', file, '-F', 'pid'], { encoding: 'utf8', timeout: 60000, maxBuffer: 256 << 20 })
  return (s.stdout || '').split('\n').filter((l) => l.trim()).length
}
