'use strict'
// Coexistence with other profilers and with itself, each in a fresh
// process sampling at 1 kHz with worker_threads busy:
// - `node --cpu-prof` (V8's CPU profiler, SIGPROF-driven on Linux);
// - `node --prof` (V8's tick profiler, also SIGPROF);
// - the inspector's Profiler domain (Profiler.start/stop), in the main
//   thread and in a worker, interleaved with start()/stop() every way;
// - a second copy of the addon loaded from another path: both copies
//   sample, each on its own real-time signal, in every start/stop order;
// - `perf record -g` around the whole process, and `perf record -p`
//   attached to a running one.
// Neither side may hang, and both must produce a non-empty profile.

const fs = require('fs')
const path = require('path')
const { spawn, spawnSync } = require('child_process')
const { main, progress } = require('../lib/child')
const { runNode, run, describe, tmpdir, ROOT, ADDON } = require('../lib/proc')
const { delay } = require('../lib/check')

/** An app that samples at 1 kHz for `seconds` with 2 busy workers and prints a JSON line. */
function app(seconds, extra = '') {
  return `
const ms = require(${JSON.stringify(ADDON)})
const { Worker } = require('worker_threads')
const ws = [0, 1].map(() => new Worker('const e = Date.now() + ${seconds * 1000}; let x = 0; while (Date.now() < e) x += JSON.stringify({ x }).length', { eval: true }))
ms.start({ intervalMs: 1 })
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }
const end = Date.now() + ${seconds * 1000}
let x = 0
while (Date.now() < end) x += fib(18)
${extra}
Promise.all(ws.map((w) => new Promise((r) => w.on('exit', r)))).then(() => {
  const p = ms.stop()
  console.log(JSON.stringify({ samples: p.samples.thread.length, pid: process.pid }))
})
`
}

function lastJson(stdout) {
  try {
    return JSON.parse(stdout.trim().split('\n').pop())
  } catch {
    return null
  }
}

const INSPECTOR_APP = (seconds) => `
const ms = require(${JSON.stringify(ADDON)})
const inspector = require('inspector')
const { Worker, isMainThread, parentPort } = require('worker_threads')
function post(s, m, p) { return new Promise((res, rej) => s.post(m, p || {}, (e, r) => (e ? rej(e) : res(r)))) }
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2) }
async function spinAsync(ms_) { const end = Date.now() + ms_; while (Date.now() < end) { fib(15); await new Promise((r) => setImmediate(r)) } }
async function profileWith(order, ms_) {
  const s = new inspector.Session(); s.connect()
  await post(s, 'Profiler.enable')
  await post(s, 'Profiler.setSamplingInterval', { interval: 100 })
  const steps = { ms: () => ms.start({ intervalMs: 1 }), v8: () => post(s, 'Profiler.start') }
  const stops = { ms: () => ms.stop(), v8: () => post(s, 'Profiler.stop') }
  let mine, theirs
  for (const k of order.start) await steps[k]()
  await spinAsync(ms_)
  for (const k of order.stop) { const r = await stops[k](); if (k === 'ms') mine = r; else theirs = r.profile }
  s.disconnect()
  return { machsampler: mine.samples.thread.length, v8: theirs.samples.length, v8Nodes: theirs.nodes.length }
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
    // The inspector Profiler inside a worker, while the main thread samples.
    const w = new Worker(__filename)
    const inWorker = await new Promise((r) => w.once('message', r))
    console.log(JSON.stringify({ main, inWorker }))
  })().catch((e) => { console.error(e); process.exit(1) })
} else {
  (async () => {
    const s = new inspector.Session(); s.connect()
    await post(s, 'Profiler.enable')
    await post(s, 'Profiler.start')
    ms.start({ intervalMs: 1 })
    await spinAsync(${seconds * 300})
    const mine = ms.stop()
    const theirs = (await post(s, 'Profiler.stop')).profile
    parentPort.postMessage({ machsampler: mine.samples.thread.length, v8: theirs.samples.length })
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

const TWO_COPIES_APP = (copy, seconds) => `
const fs = require('fs')
const caught = () => BigInt('0x' + /SigCgt:\\s+(\\w+)/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1])
const bits = (v) => v.toString(2).split('').filter((b) => b === '1').length
const before = caught()
const a = require(${JSON.stringify(ADDON)})
const b = require(${JSON.stringify(copy)})
const { Worker } = require('worker_threads')
const ws = [0, 1].map(() => new Worker('const e = Date.now() + ${seconds * 1000 + 3000}; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1)', { eval: true }))
const spin = (ms) => { const e = Date.now() + ms; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1) }
const out = { distinct: a.start !== b.start, orders: [] }
// Both at once, every start/stop order.
for (const [s1, s2, t1, t2] of [[a, b, a, b], [a, b, b, a], [b, a, a, b], [b, a, b, a]]) {
  s1.start({ intervalMs: 1 }); s2.start({ intervalMs: 1 })
  spin(${seconds * 200})
  const p1 = t1.stop(), p2 = t2.stop()
  out.orders.push([p1.samples.thread.length, p2.samples.thread.length])
}
out.newSignals = bits(caught()) - bits(before)
// Interleaved churn of the two copies.
let cycles = 0
for (let i = 0; i < 100; i++) {
  const x = i % 2 ? a : b, y = i % 2 ? b : a
  x.start({ intervalMs: 1 }); spin(1); y.start({ intervalMs: 1 }); spin(1); x.stop(); y.stop(); cycles++
}
out.cycles = cycles
out.running = [a.isRunning(), b.isRunning()]
Promise.all(ws.map((w) => w.terminate())).then(() => console.log(JSON.stringify(out)))
`

main(async (o, c) => {
  const seconds = o.seconds ?? 2
  const node = o.node || process.execPath
  const dir = tmpdir('coexist')

  // --cpu-prof
  {
    const profDir = path.join(dir, 'cpuprof')
    const r = await runNode(app(seconds), { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval', '100'], timeoutMs: 60000, node })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `--cpu-prof: ${describe(r)}`)
    if (out) {
      c.samples += out.samples
      c.ok(out.samples > 100, `--cpu-prof: machsampler took only ${out.samples} samples`)
    }
    const files = fs.existsSync(profDir) ? fs.readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile')) : []
    c.ok(files.length >= 1, `--cpu-prof wrote no .cpuprofile`)
    let v8Samples = 0
    for (const f of files) {
      try {
        v8Samples += JSON.parse(fs.readFileSync(path.join(profDir, f), 'utf8')).samples.length
      } catch (e) {
        c.ok(false, `--cpu-prof: ${f} does not parse: ${e.message}`)
      }
    }
    c.ok(v8Samples > 100, `--cpu-prof: V8's profile has only ${v8Samples} samples`)
    c.info.cpuProf = { machsampler: out && out.samples, v8: v8Samples, files: files.length }
  }

  // --prof (V8's tick profiler)
  {
    const log = path.join(dir, 'v8.log')
    const r = await runNode(app(seconds), { nodeArgs: ['--prof', `--logfile=${log}`, '--no-logfile-per-isolate'], timeoutMs: 60000, node })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `--prof: ${describe(r)}`)
    if (out) c.samples += out.samples
    const ticks = fs.existsSync(log) ? (fs.readFileSync(log, 'utf8').match(/^tick,/gm) || []).length : 0
    c.ok(ticks > 100, `--prof: only ${ticks} ticks in V8's log`)
    c.info.prof = { machsampler: out && out.samples, v8Ticks: ticks }
  }

  // The inspector Profiler, in-process.
  {
    const r = await runNode(INSPECTOR_APP(seconds), { timeoutMs: 60000, node })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `inspector Profiler: ${describe(r)}`)
    if (out) {
      for (const [i, m] of out.main.entries()) {
        c.samples += m.machsampler
        c.ok(m.machsampler > 50 && m.v8 > 50, `inspector Profiler, order ${i}: machsampler ${m.machsampler} samples, V8 ${m.v8}`)
      }
      c.samples += out.inWorker.machsampler
      c.ok(out.inWorker.machsampler > 50 && out.inWorker.v8 > 50, `inspector Profiler in a worker: machsampler ${out.inWorker.machsampler}, V8 ${out.inWorker.v8}`)
      c.info.inspector = out
    }
  }

  // A second copy of the addon from another path.
  {
    const copy = copyAddon(fs.mkdtempSync(path.join(dir, 'copy-')))
    const r = await runNode(TWO_COPIES_APP(copy, seconds), { timeoutMs: 60000, node })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `two copies: ${describe(r)}`)
    if (out) {
      c.ok(out.distinct, 'two copies: the second path loaded the same module')
      for (const [i, [n1, n2]] of out.orders.entries()) {
        c.samples += n1 + n2
        c.ok(n1 > 50 && n2 > 50, `two copies, order ${i}: ${n1} and ${n2} samples`)
      }
      c.eq(out.newSignals, 2, 'two copies: real-time signals with a handler (one per copy)')
      c.eq(out.cycles, 100, 'two copies: interleaved start/stop cycles')
      c.eq(out.running, [false, false], 'two copies: both stopped at the end')
      c.info.twoCopies = out
    }
  }

  // perf record around the process, and attached to it.
  const perfOk = spawnSync('perf', ['--version'], { encoding: 'utf8' }).status === 0
  c.ok(perfOk, 'perf is not installed (apt-get install linux-perf)')
  if (perfOk) {
    const data = path.join(dir, 'perf.data')
    const file = path.join(dir, 'perf-app.js')
    fs.writeFileSync(file, app(seconds))
    const r = await run('perf', ['record', '-q', '-F', '999', '-g', '-o', data, '--', node, file], { timeoutMs: 90000, note: 'perf record' })
    const out = lastJson(r.stdout)
    c.ok(r.code === 0 && out, `perf record -- node: ${describe(r)}`)
    if (out) c.samples += out.samples
    const perfSamples = countPerfSamples(data)
    c.ok(perfSamples > 100, `perf record -- node: perf recorded ${perfSamples} samples`)

    // Attached with -p to a process already sampling.
    const data2 = path.join(dir, 'perf-attach.data')
    const longFile = path.join(dir, 'perf-app-long.js')
    fs.writeFileSync(longFile, app(seconds + 3))
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
    if (out2) c.samples += out2.samples
    c.ok(out2 && out2.samples > 100, `a process with perf attached: ${out2 && out2.samples} samples`)
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
