#!/usr/bin/env node
'use strict'
// npm run bench [-- --quick] [-- --only=overhead,overheadAB,rate,...]
//
// Measures machsampler next to V8's profiler (--cpu-prof) and perf, and
// writes every figure to bench/results/latest.json, then prints a table.
// The machines are shared and noisy, so every comparison is a ratio taken
// in the same run: configurations are interleaved round by round
// (A B C A B C ...), each round's ratio is taken against that round's
// baseline, and the median of the rounds is reported with its spread.
// Overhead is also taken as on/off phases inside one process (a process's
// JIT makes its speed vary ±15 % from one process to the next), and as the
// sampler's own measured CPU (its thread plus handler time), the part of
// the overhead that no noise hides.
// Nothing here passes or fails; targets are printed next to the figures.

const { spawn, spawnSync, execFileSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

const ROOT = path.join(__dirname, '..')
const WL = path.join(__dirname, 'workloads')
const args = process.argv.slice(2)
const QUICK = args.includes('--quick')
const ONLY = (args.find((a) => a.startsWith('--only=')) || '').slice(7).split(',').filter(Boolean)
const want = (name) => ONLY.length === 0 || ONLY.includes(name)
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-bench-'))

const cfg = QUICK
  ? { rounds: 2, seconds: 1.5, rateSeconds: 2, scale: [8, 64], memSeconds: 3, fidelitySeconds: 3, postSamples: 200000, abCycles: 3 }
  : { rounds: 5, seconds: 4, rateSeconds: 10, scale: [8, 64, 256], memSeconds: 60, fidelitySeconds: 15, postSamples: 1000000, abCycles: 15 }

const log = (...m) => process.stderr.write(m.join(' ') + '\n')

// ---------------------------------------------------------------------------
// helpers

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  if (!s.length) return null
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

function spread(xs) {
  return xs.length ? { min: Math.min(...xs), max: Math.max(...xs), n: xs.length } : null
}

function percentile(sorted, q) {
  if (!sorted.length) return null
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
}

function runNode(script, { env = {}, nodeArgs = [], wrap = null, timeoutMs = 300000 } = {}) {
  const cmd = wrap ? wrap[0] : process.execPath
  const argv = wrap ? [...wrap.slice(1), process.execPath, ...nodeArgs, script] : [...nodeArgs, script]
  const r = spawnSync(cmd, argv, { env: { ...process.env, ...env }, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 << 20 })
  if (r.status !== 0) throw new Error(`${cmd} ${argv.join(' ')} failed (${r.status} ${r.signal}): ${r.stderr.slice(-2000)}`)
  const line = r.stdout.trim().split('\n').pop()
  return JSON.parse(line)
}

function runJson(script, arg) {
  const r = spawnSync(process.execPath, [script, JSON.stringify(arg)], { encoding: 'utf8', timeout: 300000, maxBuffer: 64 << 20 })
  if (r.status !== 0) throw new Error(`${script} failed (${r.status} ${r.signal}): ${r.stderr.slice(-2000)}`)
  return JSON.parse(r.stdout.trim().split('\n').pop())
}

// The sampler thread's CPU for JavaScript names: the same workload (main +
// 3 workers of JS at 1 kHz) with jsNames on and off, interleaved; the
// difference per tick and per JS sample, and stop()'s time (where names
// are resolved now).
function jsNames(results) {
  const seconds = QUICK ? 1.5 : 3
  const on = []
  const off = []
  for (let i = 0; i < cfg.rounds; i++) {
    on.push(runJson(path.join(WL, 'jsnames-cost.js'), { js: true, ms: seconds * 1000 }))
    off.push(runJson(path.join(WL, 'jsnames-cost.js'), { js: false, ms: seconds * 1000 }))
  }
  const perTick = (r) => r.samplerCpuNs / r.ticks / 1000
  const deltas = on.map((r, i) => perTick(r) - perTick(off[i]))
  const perJsSample = on.map((r, i) => ((perTick(r) - perTick(off[i])) * r.ticks) / Math.max(1, r.jsSamples))
  results.jsNames = {
    note: 'Sampler-thread CPU per tick at 1 kHz, main + 3 workers of JS, jsNames on vs off in interleaved runs; stop() wall time with names resolved at stop.',
    seconds,
    onUsPerTick: median(on.map(perTick)),
    offUsPerTick: median(off.map(perTick)),
    deltaUsPerTick: median(deltas),
    deltaSpread: spread(deltas),
    usPerJsSample: median(perJsSample),
    jsSamples: median(on.map((r) => r.jsSamples)),
    stopMsOn: median(on.map((r) => r.stopNs / 1e6)),
    stopMsOff: median(off.map((r) => r.stopNs / 1e6)),
  }
  log(`jsNames ${JSON.stringify(results.jsNames)}`)
}

// CPU added per worker created while sampling: workers created one after
// another (each runs a little JS), with no sampler, jsNames off and on,
// interleaved; plus the CPU of registering each (its interrupt, code-event
// install included).
function workerStartup(results) {
  const workers = QUICK ? 10 : 30
  const modes = { off: [], nojs: [], js: [] }
  for (let i = 0; i < cfg.rounds; i++) {
    for (const mode of Object.keys(modes)) modes[mode].push(runJson(path.join(WL, 'worker-startup.js'), { mode, workers }))
  }
  const per = (r) => r.cpuUs / r.workers / 1000
  const jsVsNojs = modes.js.map((r, i) => per(r) - per(modes.nojs[i]))
  const reg = modes.js.map((r) => r.v8.discovery.registerCpuNs / Math.max(1, r.v8.discovery.registered) / 1e6)
  results.workerStartup = {
    note: 'CPU ms per worker created while sampling at 1 kHz; jsNames on minus off in the same round; registration CPU measured in the registering interrupt.',
    workers,
    offMsPerWorker: median(modes.off.map(per)),
    nojsMsPerWorker: median(modes.nojs.map(per)),
    jsMsPerWorker: median(modes.js.map(per)),
    jsNamesMsPerWorker: median(jsVsNojs),
    jsNamesSpread: spread(jsVsNojs),
    registerMsPerWorker: median(reg),
    registeredPerRun: median(modes.js.map((r) => r.v8.discovery.registered)),
  }
  log(`workerStartup ${JSON.stringify(results.workerStartup)}`)
}

// JS self time against V8's own profiler on a server workload where V8
// inlines: L1 distance of the main thread's JS self-time shares,
// machsampler against each of two --cpu-prof runs, and the two --cpu-prof
// runs against each other (the noise). Inlined functions are credited to
// the function they were inlined into by machsampler, split out by V8.
function inlineAgreement(results) {
  const script = path.join(WL, 'inline-server.js')
  const cpuprof = () => {
    const dir = fs.mkdtempSync(path.join(TMP, 'cpuprof-'))
    const r = spawnSync(process.execPath, ['--cpu-prof', '--cpu-prof-interval', '1000', '--cpu-prof-dir', dir, script, '{}'], { encoding: 'utf8', timeout: 120000 })
    if (r.status !== 0) throw new Error(`inline-server --cpu-prof failed: ${r.stderr}`)
    const prof = JSON.parse(fs.readFileSync(path.join(dir, fs.readdirSync(dir).find((f) => f.endsWith('.cpuprofile')))))
    const byId = new Map(prof.nodes.map((n) => [n.id, n]))
    const counts = new Map()
    let total = 0
    let t = prof.startTime
    for (let i = 0; i < prof.samples.length; i++) {
      t += prof.timeDeltas[i]
      if (t - prof.startTime < 800000) continue // the same window as machsampler's
      const n = byId.get(prof.samples[i])
      if (!n.callFrame.url) continue
      const name = n.callFrame.functionName || '(anonymous)'
      counts.set(name, (counts.get(name) || 0) + 1)
      total++
    }
    return Object.fromEntries([...counts].map(([k, v]) => [k, v / total]))
  }
  const l1 = (a, b) => [...new Set([...Object.keys(a), ...Object.keys(b)])].reduce((d, k) => d + Math.abs((a[k] || 0) - (b[k] || 0)), 0)
  const noise = []
  const all = []
  const jsLeaf = []
  for (let i = 0; i < Math.min(cfg.rounds, 3); i++) {
    const a = cpuprof()
    const b = cpuprof()
    const ours = runJson(script, { sample: true })
    const oursJs = runJson(script, { sample: true, jsLeaf: true })
    noise.push(l1(a, b))
    all.push((l1(ours, a) + l1(ours, b)) / 2)
    jsLeaf.push((l1(oursJs, a) + l1(oursJs, b)) / 2)
  }
  results.inlineAgreement = {
    note: 'L1 distance of main-thread JS self-time shares on a loopback HTTP server with inlining; noise = two --cpu-prof runs.',
    noiseL1: median(noise),
    l1: median(all),
    l1JsLeafOnly: median(jsLeaf),
    spread: { noise: spread(noise), l1: spread(all), l1JsLeafOnly: spread(jsLeaf) },
  }
  log(`inlineAgreement ${JSON.stringify(results.inlineAgreement)}`)
}

function tool(cmd, argv) {
  try {
    return execFileSync(cmd, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim().split('\n')[0]
  } catch {
    return null
  }
}

function perfWorks() {
  const out = path.join(TMP, 'probe.data')
  const r = spawnSync('perf', ['record', '-F', '1000', '-g', '-o', out, '--', 'true'], { encoding: 'utf8' })
  return r.status === 0 ? true : (r.stderr || r.error?.message || 'perf failed').trim().split('\n').pop()
}

const addon = () => require(ROOT)

// ---------------------------------------------------------------------------
// 1. overhead (and disruption figures from the same runs)

function overhead(results, perfOk) {
  const configs = [
    { name: 'none', env: {} },
    { name: 'machsampler100Hz', env: { BENCH_SAMPLER_INTERVAL: '10' } },
    { name: 'machsampler1kHz', env: { BENCH_SAMPLER_INTERVAL: '1' } },
    { name: 'cpuProf1kHz', nodeArgs: ['--cpu-prof', '--cpu-prof-interval', '1000', '--cpu-prof-dir', path.join(TMP, 'cpuprof')] },
  ]
  // perf runs in its own process: /usr/bin/time gives perf + node, and
  // node reports its own, so perf's CPU is the difference (its start and
  // its exit-time processing included: a cost of the tool).
  const perfTime = path.join(TMP, 'perf.time')
  const timeWrap = fs.existsSync('/usr/bin/time') ? ['/usr/bin/time', '-f', '%U %S', '-o', perfTime] : []
  if (perfOk === true) configs.push({ name: 'perf1kHz', wrap: [...timeWrap, 'perf', 'record', '-F', '1000', '-g', '-q', '-o', path.join(TMP, 'perf.data'), '--'], timed: timeWrap.length > 0 })
  const out = {}
  for (const workload of ['cpu', 'pool']) {
    const runs = Object.fromEntries(configs.map((c) => [c.name, []]))
    const ratios = Object.fromEntries(configs.map((c) => [c.name, []]))
    const cpuRatios = Object.fromEntries(configs.map((c) => [c.name, []]))
    for (let round = 0; round < cfg.rounds; round++) {
      // Rotate the order so no configuration always runs first.
      const order = configs.map((_, i) => configs[(i + round) % configs.length])
      const roundOps = {}
      for (const c of order) {
        const r = runNode(path.join(WL, `${workload}.js`), {
          env: { BENCH_SECONDS: String(cfg.seconds), ...c.env },
          nodeArgs: c.nodeArgs || [],
          wrap: c.wrap || null,
        })
        if (c.timed) {
          const [u, sys] = fs.readFileSync(perfTime, 'utf8').trim().split('\n').pop().split(' ').map(Number)
          r.toolCpuSec = Math.max(0, u + sys - r.processCpuSec)
        }
        runs[c.name].push(r)
        roundOps[c.name] = r
      }
      const cpuPerOp = (r) => (r.cpuSec + (r.toolCpuSec || 0)) / r.ops
      for (const c of configs) {
        ratios[c.name].push(roundOps[c.name].opsPerSec / roundOps.none.opsPerSec)
        cpuRatios[c.name].push(cpuPerOp(roundOps[c.name]) / cpuPerOp(roundOps.none))
      }
      log(`overhead ${workload} round ${round + 1}/${cfg.rounds} (throughput, CPU per op):`, configs.map((c) => `${c.name}=${ratios[c.name][round].toFixed(3)},${cpuRatios[c.name][round].toFixed(3)}`).join(' '))
    }
    out[workload] = Object.fromEntries(
      configs.map((c) => [
        c.name,
        {
          throughputRatio: median(ratios[c.name]),
          overheadPct: (1 - median(ratios[c.name])) * 100,
          spread: spread(ratios[c.name]),
          opsPerSec: median(runs[c.name].map((r) => r.opsPerSec)),
          cpuPerOpRatio: median(cpuRatios[c.name]),
          cpuOverheadPct: (median(cpuRatios[c.name]) - 1) * 100,
          cpuSpread: spread(cpuRatios[c.name]),
        },
      ]),
    )
    for (const name of ['machsampler100Hz', 'machsampler1kHz']) {
      const st = runs[name].map((r) => r.stats)
      out[workload][name].sampler = {
        suspendP50Ns: median(st.map((s) => s.suspendP50Ns)),
        suspendP99Ns: median(st.map((s) => s.suspendP99Ns)),
        suspendMaxNs: Math.max(...st.map((s) => s.maxSuspendNs)),
        deliveryP50Ns: median(st.map((s) => s.deliveryP50Ns)),
        deliveryP99Ns: median(st.map((s) => s.deliveryP99Ns)),
        samplerCpuPct: median(runs[name].map((r) => (r.stats.samplerCpuNs / 1e9 / r.seconds) * 100)),
        // What the sampler itself spends (its thread, plus every handler's
        // time in the sampled threads), over the workload's CPU time in the
        // same window: the direct part of the overhead, measured rather
        // than inferred from a noisy throughput difference.
        directCostPct: median(runs[name].map((r) => ((r.stats.samplerCpuNs + r.stats.totalSuspendNs) / 1e9 / r.cpuSec) * 100)),
        ticksMissed: st.reduce((a, s) => a + s.ticksMissed, 0),
      }
    }
  }
  if (perfOk !== true) out.perfSkipped = perfOk
  results.overhead = out
}

// 1b. overhead as on/off phases inside one process (bench/workloads/toggle.js
// says why): each configuration against the "off" phase of the same cycle.
function overheadAB(results, perfOk) {
  const phases = ['off', 'ms100', 'ms1k', 'v8prof1k', ...(perfOk === true ? ['perf1k'] : [])]
  const out = { note: 'Throughput in on/off phases of one process (500 ms phases, the first 100 ms not counted), the configurations rotated each cycle; ratio to the same cycle\'s off phase, median of the cycles. v8prof1k is V8\'s CPU profiler at 1 ms through the inspector, on every thread (what --cpu-prof runs).' }
  for (const workload of ['cpu', 'pool']) {
    const r = runNode(path.join(WL, 'toggle.js'), {
      env: { BENCH_WORKLOAD: workload, BENCH_PHASES: phases.join(','), BENCH_CYCLES: String(cfg.abCycles), BENCH_PERF_OUT: path.join(TMP, 'ab.perf.data') },
    })
    out[workload] = Object.fromEntries(
      phases.map((p) => {
        const ratios = r.rates[p].map((x, i) => x / r.rates.off[i])
        return [p, { throughputRatio: median(ratios), overheadPct: (1 - median(ratios)) * 100, spread: spread(ratios) }]
      }),
    )
    log(`overhead A/B ${workload}:`, phases.map((p) => `${p}=${out[workload][p].throughputRatio.toFixed(3)}`).join(' '))
  }
  results.overheadAB = out
}

// ---------------------------------------------------------------------------
// 2. disruption: threads <= cores, oversubscribed, and the kernel's share

function disruption(results) {
  const cores = os.cpus().length
  const fit = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: String(cfg.seconds), BENCH_WORKERS: String(Math.max(0, cores - 2)), BENCH_SAMPLER_INTERVAL: '1' } })
  // The same without V8's GetStackSample in the handler: the cost of JS
  // names inside the stopped window, measured on its own.
  const fitNoJs = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: String(cfg.seconds), BENCH_WORKERS: String(Math.max(0, cores - 2)), BENCH_SAMPLER_INTERVAL: '1', BENCH_JS_NAMES: '0' } })
  const over = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: String(cfg.seconds), BENCH_WORKERS: String(cores * 2), BENCH_SAMPLER_INTERVAL: '1' } })
  const rt = require(path.join(ROOT, 'binding.js'))._benchSignalRoundTrip(QUICK ? 20000 : 100000).sort((a, b) => a - b)
  const pick = (r, busy) => ({
    busyThreads: busy,
    suspendP50Ns: r.stats.suspendP50Ns,
    suspendP99Ns: r.stats.suspendP99Ns,
    suspendMaxNs: r.stats.maxSuspendNs,
    deliveryP50Ns: r.stats.deliveryP50Ns,
    deliveryP99Ns: r.stats.deliveryP99Ns,
    deliveryMaxNs: r.stats.deliveryMaxNs,
    samples: r.samples,
  })
  results.disruption = {
    note: 'Time a sampled thread is stopped per sample: signal-handler entry to exit (Linux), from the sampler histogram (bucket upper edges, within 12.5 %). The kernel share is an empty signal round trip to the calling thread.',
    cores,
    threadsWithinCores: pick(fit, Math.max(1, cores - 1)),
    threadsWithinCoresNoJsNames: pick(fitNoJs, Math.max(1, cores - 1)),
    oversubscribed: pick(over, cores * 2 + 1),
    kernelRoundTrip: { p50Ns: percentile(rt, 0.5), p99Ns: percentile(rt, 0.99), samples: rt.length },
  }
}

// ---------------------------------------------------------------------------
// 3. rate accuracy

const RATE_SCRIPT = `
const ms = require(${JSON.stringify(ROOT)})
const { Worker } = require('worker_threads')
const [intervalMs, seconds, busy] = process.argv.slice(2).map(Number)
const stop = new Int32Array(new SharedArrayBuffer(4))
const ws = Array.from({ length: busy }, () => new Worker('const {workerData}=require("worker_threads");const a=new Int32Array(workerData);let x=0;while(Atomics.load(a,0)===0)x+=Math.sqrt(x+1)', { eval: true, workerData: stop.buffer }))
setTimeout(() => {
  ms.start({ intervalMs })
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, seconds * 1000)
  const p = ms.stop()
  Atomics.store(stop, 0, 1)
  const main = p.threads.findIndex((t) => t.isMain)
  let mainSamples = 0
  for (const t of p.samples.thread) if (t === main) mainSamples++
  const durationNs = Number(p.endTimeNs - p.startTimeNs)
  const expected = durationNs / Number(p.intervalNs)
  console.log(JSON.stringify({ ticks: p.stats.ticks, ticksMissed: p.stats.ticksMissed, expected, mainSamples }))
  process.exit(0)
}, 300)
`

function rate(results) {
  const script = path.join(TMP, 'rate.js')
  fs.writeFileSync(script, RATE_SCRIPT)
  const out = {}
  for (const hz of [1000, 100]) {
    for (const busy of [0, 2]) {
      const r = JSON.parse(execFileSync(process.execPath, [script, String(1000 / hz), String(cfg.rateSeconds), String(busy)], { encoding: 'utf8' }).trim().split('\n').pop())
      // Deadlines are absolute, so every tick the sampler could not run on
      // time is counted as missed: ticks / (ticks + missed) is achieved over
      // requested within the sampling window. The wall-clock ratio also
      // counts stop() draining the last captures (up to 50 ms).
      out[`${hz}Hz_${busy ? 'loaded' : 'idle'}`] = {
        ...r,
        achievedRatio: r.ticks / (r.ticks + r.ticksMissed),
        wallClockRatio: r.ticks / r.expected,
        mainThreadRatio: r.mainSamples / r.ticks,
        busyThreads: busy,
        seconds: cfg.rateSeconds,
      }
      log(`rate ${hz}Hz busy=${busy}: ${(r.ticks / (r.ticks + r.ticksMissed)).toFixed(4)}`)
    }
  }
  results.rate = out
}

// ---------------------------------------------------------------------------
// 4. fidelity against perf, in the same process at the same time

// perf names JIT code from the same perf map, in V8's raw form; both sides
// are reduced to a bare function name so they can be compared.
function normalizeName(n) {
  let s = n.trim()
  const js = s.match(/^(?:JS|LazyCompile|Function):[*~^+']*(\S*)/)
  if (js) return 'js:' + (js[1] || '(anonymous)')
  const ours = s.match(/^(\S+) \((?:\S+:\d+(?::\d+)?|[^)]*)\)$/)
  if (ours && !s.includes('::')) return 'js:' + ours[1]
  s = s.replace(/\s*\[clone [^\]]*\]/g, '').replace(/\.(constprop|isra|part|cold)\.\d+/g, '')
  // Drop parameter lists, keeping the qualified name.
  let depth = 0
  let cut = -1
  for (let i = s.length - 1; i >= 0; i--) {
    if (s[i] === ')') depth++
    else if (s[i] === '(') {
      depth--
      if (depth === 0) {
        cut = i
        break
      }
    }
  }
  if (cut > 0 && s.endsWith(')')) s = s.slice(0, cut)
  return s.replace(/ const$/, '')
}

function shares(counts) {
  const total = [...counts.values()].reduce((a, b) => a + b, 0)
  return new Map([...counts.entries()].map(([k, v]) => [k, v / total]))
}

function fidelity(results, perfOk) {
  if (perfOk !== true) {
    results.fidelity = { skipped: perfOk }
    return
  }
  const pidFile = path.join(TMP, 'fid.pid')
  const prof = path.join(TMP, 'fid.machprof')
  const perfData = path.join(TMP, 'fid.perf.data')
  const child = spawn(process.execPath, ['--perf-basic-prof-only-functions', '--interpreted-frames-native-stack', path.join(WL, 'mixed.js')], {
    env: { ...process.env, BENCH_SECONDS: String(cfg.fidelitySeconds), BENCH_SAMPLER_INTERVAL: '1', BENCH_PID_FILE: pidFile, BENCH_START_DELAY: '700', BENCH_PROFILE_OUT: prof },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  let stdout = ''
  child.stdout.on('data', (d) => (stdout += d))
  return new Promise((resolve, reject) => {
    const waitPid = () => {
      if (!fs.existsSync(pidFile)) return setTimeout(waitPid, 20)
      const pid = fs.readFileSync(pidFile, 'utf8').trim()
      const perf = spawn('perf', ['record', '-F', '999', '-g', '-q', '-o', perfData, '-p', pid], { stdio: 'ignore' })
      child.on('exit', () => {
        perf.on('exit', () => {
          try {
            const meta = JSON.parse(stdout.trim().split('\n').pop())
            resolve(compareWithPerf(results, prof, perfData, pid, meta))
          } catch (e) {
            reject(e)
          }
        })
        perf.kill('SIGINT')
      })
    }
    waitPid()
  })
}

function compareWithPerf(results, profPath, perfData, pid, meta) {
  const ms = addon()
  const p = ms.loadProfile(profPath)
  const sym = ms.symbolicate(p)
  // Busy threads: the main thread and the JS worker (the two threads with
  // the most non-idle samples).
  const busy = new Map()
  for (let i = 0; i < p.samples.thread.length; i++) if (!p.samples.idle[i]) busy.set(p.samples.thread[i], (busy.get(p.samples.thread[i]) || 0) + 1)
  const busyIdx = [...busy.entries()].sort((a, b) => b[1] - a[1]).slice(0, 2).map(([t]) => t)
  const busyTids = new Set(busyIdx.map((i) => p.threads[i].tid))
  const ours = new Map()
  for (let i = 0; i < p.samples.thread.length; i++) {
    if (!busyIdx.includes(p.samples.thread[i]) || p.samples.idle[i]) continue
    const name = normalizeName(sym.functions.name[sym.frameFunction[p.stacks.frame[p.samples.stack[i]]]])
    ours.set(name, (ours.get(name) || 0) + 1)
  }
  // perf script prints a "tid" line, then the call chain leaf first. Kernel
  // frames are skipped: machsampler sees the user-space pc (a thread in a
  // system call is stopped at the call), so the first user frame is the
  // comparable leaf.
  const script = spawnSync('perf', ['script', '-i', perfData, '-F', 'tid,ip,sym,dso'], { encoding: 'utf8', maxBuffer: 512 << 20 })
  const theirs = new Map()
  let tid = null
  let taken = true
  for (const line of script.stdout.split('\n')) {
    const head = line.match(/^\s*(\d+)\s*$/)
    if (head) {
      tid = Number(head[1])
      taken = !busyTids.has(tid)
      continue
    }
    if (taken || !line.trim()) continue
    const f = line.trim().match(/^([0-9a-f]+)\s+(.*?)\s+\(([^)]*)\)$/)
    if (!f || f[3].includes('kernel.kallsyms') || f[3] === '[unknown]' && f[1].startsWith('ffff')) continue
    const name = normalizeName(f[2].replace(/\+0x[0-9a-f]+$/, ''))
    theirs.set(name, (theirs.get(name) || 0) + 1)
    taken = true
  }
  // The noise floor: the same L1 between two interleaved halves of our own
  // samples. With a few thousand samples, the long tail of rarely-sampled
  // functions alone gives an L1 of this size.
  const halves = [new Map(), new Map()]
  let parity = 0
  for (let i = 0; i < p.samples.thread.length; i++) {
    if (!busyIdx.includes(p.samples.thread[i]) || p.samples.idle[i]) continue
    const name = normalizeName(sym.functions.name[sym.frameFunction[p.stacks.frame[p.samples.stack[i]]]])
    const h = halves[parity++ & 1]
    h.set(name, (h.get(name) || 0) + 1)
  }
  const l1Of = (x, y) => {
    let d = 0
    for (const k of new Set([...x.keys(), ...y.keys()])) d += Math.abs((x.get(k) || 0) - (y.get(k) || 0))
    return d
  }
  const noiseFloor = l1Of(shares(halves[0]), shares(halves[1]))
  const a = shares(ours)
  const b = shares(theirs)
  const keys = new Set([...a.keys(), ...b.keys()])
  let l1 = 0
  for (const k of keys) l1 += Math.abs((a.get(k) || 0) - (b.get(k) || 0))
  const top = (m) => [...m.entries()].sort((x, y) => y[1] - x[1]).slice(0, 10).map(([k, v]) => [k, +v.toFixed(4)])
  const diffs = [...keys].map((k) => [k, +((a.get(k) || 0) - (b.get(k) || 0)).toFixed(4)]).sort((x, y) => Math.abs(y[1]) - Math.abs(x[1])).slice(0, 10)
  results.fidelity = {
    note: 'Per-function self-time shares on the two busiest threads, machsampler (1 kHz) and perf record -F 999 -g -p on the same process at the same time; names reduced to bare function names.',
    l1,
    l1NoiseFloor: noiseFloor,
    samples: { machsampler: [...ours.values()].reduce((x, y) => x + y, 0), perf: [...theirs.values()].reduce((x, y) => x + y, 0) },
    topMachsampler: top(a),
    topPerf: top(b),
    largestDifferences: diffs,
  }
  log(`fidelity L1 = ${l1.toFixed(3)}`)
}

// ---------------------------------------------------------------------------
// 5. scale: sampler CPU per tick as threads grow

const SCALE_SCRIPT = `
const ms = require(${JSON.stringify(ROOT)})
const { Worker } = require('worker_threads')
const [n, busy, hz, seconds] = process.argv.slice(2).map(Number)
const sab = new SharedArrayBuffer(4)
let ready = 0
for (let i = 0; i < n; i++) {
  const w = new Worker('const {workerData:{sab,busy},parentPort}=require("worker_threads");parentPort.postMessage(1);const a=new Int32Array(sab);if(busy){let x=0;while(Atomics.load(a,0)===0)x+=Math.sqrt(x+1)}else Atomics.wait(a,0,0)', { eval: true, workerData: { sab, busy: i < busy } })
  w.once('message', () => { if (++ready === n) setTimeout(go, 500) })
}
function go() {
  ms.start({ intervalMs: 1000 / hz })
  let s0
  setTimeout(() => { s0 = ms.stats(); s0.t = process.hrtime.bigint() }, 1000)
  setTimeout(() => {
    const s1 = ms.stats()
    const dt = Number(process.hrtime.bigint() - s0.t) / 1e9
    const p = ms.stop()
    const cpu = s1.samplerCpuNs - s0.samplerCpuNs
    console.log(JSON.stringify({ threads: p.threads.length, ticks: s1.ticks - s0.ticks, cpuPerTickUs: cpu / (s1.ticks - s0.ticks) / 1000, samplerCpuPct: cpu / 1e9 / dt * 100, ticksMissed: p.stats.ticksMissed }))
    Atomics.store(new Int32Array(sab), 0, 1); Atomics.notify(new Int32Array(sab), 0)
    process.exit(0)
  }, 1000 + seconds * 1000)
}
`

function scale(results) {
  const script = path.join(TMP, 'scale.js')
  fs.writeFileSync(script, SCALE_SCRIPT)
  const out = {}
  for (const n of cfg.scale) {
    for (const busy of [0, 2]) {
      const r = JSON.parse(execFileSync(process.execPath, [script, String(n), String(busy), '100', QUICK ? '2' : '4'], { encoding: 'utf8', timeout: 300000 }).trim().split('\n').pop())
      out[`${n}_${busy ? '2busy' : 'idle'}`] = { workers: n, busy, hz: 100, ...r }
      log(`scale ${n} threads busy=${busy}: ${r.cpuPerTickUs.toFixed(1)} us/tick ${r.samplerCpuPct.toFixed(2)}%`)
    }
  }
  const idle = cfg.scale.map((n) => out[`${n}_idle`])
  const first = idle[0]
  const last = idle[idle.length - 1]
  out.costPerIdleThreadUs = (last.cpuPerTickUs - first.cpuPerTickUs) / (last.threads - first.threads)
  results.scale = out
}

// ---------------------------------------------------------------------------
// 6. memory and post-processing; 7. unwind completeness

function memoryAndPost(results) {
  const prof = path.join(TMP, 'mem.machprof')
  const r = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: String(cfg.memSeconds), BENCH_SAMPLER_INTERVAL: '1', BENCH_PROFILE_OUT: prof }, timeoutMs: 600000 })
  const ms = addon()
  const p = ms.loadProfile(prof)
  const n = p.samples.thread.length
  const bytes = {
    samples: n * (4 + 8 + 4 + 1 + 8),
    stacks: p.stacks.frame.length * 8,
    frames: p.frames.address.length * 8,
  }
  const total = bytes.samples + bytes.stacks + bytes.frames
  results.memory = {
    seconds: cfg.memSeconds,
    hz: 1000,
    samples: n,
    stackNodes: p.stacks.frame.length,
    frames: p.frames.address.length,
    bytesPerSample: total / n,
    dedupedStackBytesPerSample: (bytes.stacks + bytes.frames) / n,
    stopMs: r.stopMs,
  }
  // Post-processing of N samples: tile the recorded samples up to N, then
  // time symbolization (cold, in a fresh process) and two exports.
  const script = path.join(TMP, 'post.js')
  fs.writeFileSync(
    script,
    `const ms = require(${JSON.stringify(ROOT)})
const N = ${cfg.postSamples}
const p = ms.loadProfile(${JSON.stringify(prof)})
const n = p.samples.thread.length
const tile = (a, C) => { const o = new C(N); for (let i = 0; i < N; i++) o[i] = a[i % n]; return o }
const big = { ...p, samples: { thread: tile(p.samples.thread, Uint32Array), timeNs: tile(p.samples.timeNs, BigUint64Array), stack: tile(p.samples.stack, Uint32Array), idle: tile(p.samples.idle, Uint8Array), cpuDeltaNs: tile(p.samples.cpuDeltaNs, BigUint64Array) } }
const t = () => process.hrtime.bigint()
let t0 = t(); big.symbols = ms.symbolicate(big); const symMs = Number(t() - t0) / 1e6
t0 = t(); const again = ms.symbolicate(big); const symWarmMs = Number(t() - t0) / 1e6
t0 = t(); const pprof = ms.exportProfile(big, 'pprof'); const pprofMs = Number(t() - t0) / 1e6
t0 = t(); const ss = ms.exportProfile(big, 'speedscope'); const ssMs = Number(t() - t0) / 1e6
// 100,000 distinct addresses spread over the node binary's image: the
// symbolizer's own speed, cold in this process for these addresses.
const node = p.modules[0]
const U = 100000
const span = node.end - node.start
const unique = new BigUint64Array(U)
for (let i = 0; i < U; i++) unique[i] = node.start + (span * BigInt(i)) / BigInt(U)
const wide = { ...p, symbols: undefined, frames: { address: unique }, stacks: { frame: Uint32Array.from({ length: U }, (_, i) => i), parent: new Int32Array(U).fill(-1) }, samples: { thread: new Uint32Array([0]), timeNs: new BigUint64Array([p.samples.timeNs[0]]), stack: new Uint32Array([0]), idle: new Uint8Array([0]), cpuDeltaNs: new BigUint64Array([0n]) } }
t0 = t(); const wideSyms = ms.symbolicate(wide); const uniqueMs = Number(t() - t0) / 1e6
console.log(JSON.stringify({ samples: N, frames: p.frames.address.length, functions: again.functions.name.length, symbolizeColdMs: symMs, symbolizeWarmMs: symWarmMs, pprofMs, pprofBytes: pprof.length, speedscopeMs: ssMs, speedscopeBytes: ss.length, uniqueAddresses: U, symbolizeUniqueMs: uniqueMs, uniqueFunctions: wideSyms.functions.name.length }))`,
  )
  results.postProcessing = JSON.parse(execFileSync(process.execPath, [script], { encoding: 'utf8', maxBuffer: 64 << 20 }).trim().split('\n').pop())
  log(`memory ${results.memory.bytesPerSample.toFixed(1)} B/sample; post ${JSON.stringify(results.postProcessing)}`)
}

const ROOTS = /^(_start|__libc_start_main|__libc_start_call_main|start_thread|clone3?|__clone3?)$/

function threadKind(names) {
  const has = (re) => names.some((n) => re.test(n))
  if (has(/node::worker::Worker::Run|node::worker::Worker::StartThread/)) return 'worker_thread'
  if (has(/^uv__worker|^worker$|uv_thread_start/) && has(/uv__work|uv_cond_wait|worker/)) return 'libuv pool'
  if (has(/PlatformWorkerThread|WorkerThreadsTaskRunner|DelayedTaskScheduler/)) return 'V8 platform'
  if (has(/^main$|node::Start/)) return 'main'
  return 'other'
}

function unwind(results) {
  const prof = path.join(TMP, 'unwind.machprof')
  runNode(path.join(WL, 'mixed.js'), { env: { BENCH_SECONDS: QUICK ? '2' : '4', BENCH_SAMPLER_INTERVAL: '5', BENCH_PROFILE_OUT: prof } })
  const ms = addon()
  const p = ms.loadProfile(prof)
  const s = ms.symbolicate(p)
  const name = (frame) => s.functions.name[s.frameFunction[frame]]
  const perThread = new Map()
  for (let i = 0; i < p.samples.thread.length; i++) {
    const t = p.samples.thread[i]
    const e = perThread.get(t) || { total: 0, rooted: 0, busy: 0, busyRooted: 0, names: new Set() }
    let outer = null
    for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) {
      outer = name(p.stacks.frame[n])
      e.names.add(outer)
    }
    const rooted = ROOTS.test(outer || '')
    e.total++
    e.rooted += rooted
    if (!p.samples.idle[i]) {
      e.busy++
      e.busyRooted += rooted
    }
    perThread.set(t, e)
  }
  const kinds = {}
  for (const [t, e] of perThread) {
    const kind = p.threads[t].isMain ? 'main' : threadKind([...e.names])
    const k = (kinds[kind] ||= { threads: 0, samples: 0, rooted: 0, busySamples: 0, busyRooted: 0 })
    k.threads++
    k.samples += e.total
    k.rooted += e.rooted
    k.busySamples += e.busy
    k.busyRooted += e.busyRooted
  }
  for (const k of Object.values(kinds)) {
    k.rootedShare = k.samples ? k.rooted / k.samples : null
    k.busyRootedShare = k.busySamples ? k.busyRooted / k.busySamples : null
  }
  results.unwind = { note: 'Share of samples whose frame-pointer stack ends at a thread root (_start, start_thread, clone3), per thread kind; busy = non-idle samples.', kinds }
}

// ---------------------------------------------------------------------------
// table

function fmtPct(x) {
  return x == null ? '-' : `${x >= 0 ? '' : '-'}${Math.abs(x).toFixed(2)} %`
}
function fmtNs(x) {
  return x == null ? '-' : x >= 1e6 ? `${(x / 1e6).toFixed(2)} ms` : x >= 1e3 ? `${(x / 1e3).toFixed(2)} µs` : `${Math.round(x)} ns`
}
function fmtSpread(s) {
  return s ? ` [${((1 - s.max) * 100).toFixed(1)}..${((1 - s.min) * 100).toFixed(1)}]` : ''
}

function table(r) {
  const rows = []
  const o = r.overhead
  if (o) {
    for (const w of ['cpu', 'pool']) {
      const x = o[w]
      const perf = x.perf1kHz ? fmtPct(x.perf1kHz.overheadPct) + fmtSpread(x.perf1kHz.spread) : `skipped`
      rows.push([`overhead ${w} @100 Hz`, fmtPct(x.machsampler100Hz.overheadPct) + fmtSpread(x.machsampler100Hz.spread), '-', '-', '≤ 1 %'])
      rows.push([`overhead ${w} @1 kHz`, fmtPct(x.machsampler1kHz.overheadPct) + fmtSpread(x.machsampler1kHz.spread), fmtPct(x.cpuProf1kHz.overheadPct) + fmtSpread(x.cpuProf1kHz.spread), perf, '≤ 3 %, below both'])
    }
  }
  if (o) {
    for (const w of ['cpu', 'pool']) {
      const x = o[w]
      const c = (k) => x[k].sampler?.directCostPct
      if (c('machsampler100Hz') != null) rows.push([`direct cost ${w}: sampler + handlers, 100 Hz / 1 kHz`, `${c('machsampler100Hz').toFixed(2)} % / ${c('machsampler1kHz').toFixed(2)} %`, '-', '-', 'of the workload\'s CPU'])
    }
  }
  const ab = r.overheadAB
  if (ab) {
    for (const w of ['cpu', 'pool']) {
      const x = ab[w]
      const f = (c) => (c ? fmtPct(c.overheadPct) + fmtSpread(c.spread) : 'skipped')
      rows.push([`overhead ${w} @100 Hz, in-process A/B`, f(x.ms100), '-', '-', '≤ 1 %'])
      rows.push([`overhead ${w} @1 kHz, in-process A/B`, f(x.ms1k), f(x.v8prof1k), f(x.perf1k), '≤ 3 %, below both'])
    }
  }
  const d = r.disruption
  if (d) {
    const a = d.threadsWithinCores
    const b = d.oversubscribed
    rows.push([`stop p50 / p99 (${a.busyThreads} busy, ${d.cores} cores)`, `${fmtNs(a.suspendP50Ns)} / ${fmtNs(a.suspendP99Ns)}`, '-', '-', '≤ 2 µs / ≤ 20 µs'])
    rows.push(['stop max (threads ≤ cores)', fmtNs(a.suspendMaxNs), '-', '-', '< 100 µs'])
    const n = d.threadsWithinCoresNoJsNames
    if (n) rows.push(['stop p50 / p99 without JS names (native walk only)', `${fmtNs(n.suspendP50Ns)} / ${fmtNs(n.suspendP99Ns)}`, '-', '-', 'report'])
    rows.push([`stop p50 / p99 (oversubscribed, ${b.busyThreads} busy)`, `${fmtNs(b.suspendP50Ns)} / ${fmtNs(b.suspendP99Ns)}`, '-', '-', 'report'])
    rows.push(['signal delivery p50 / p99 (oversubscribed)', `${fmtNs(b.deliveryP50Ns)} / ${fmtNs(b.deliveryP99Ns)}`, '-', '-', 'report'])
    rows.push(['kernel share: empty signal round trip p50', fmtNs(d.kernelRoundTrip.p50Ns), '-', '-', 'report'])
  }
  if (r.rate) {
    for (const [k, v] of Object.entries(r.rate)) rows.push([`rate ${k.replace('_', ' ')} (${v.seconds} s)`, `${((v.achievedRatio - 1) * 100).toFixed(2)} %`, '-', '-', '±1 %'])
  }
  if (r.fidelity) {
    const f = r.fidelity
    rows.push(['fidelity vs perf (L1 of self shares)', f.l1 == null ? 'skipped' : `${f.l1.toFixed(3)} (noise floor ${f.l1NoiseFloor.toFixed(3)})`, '-', 'reference', '≤ 0.10'])
  }
  if (r.scale) {
    for (const [k, v] of Object.entries(r.scale)) {
      if (typeof v !== 'object') continue
      rows.push([`sampler CPU, ${v.threads} threads ${v.busy ? '2 busy' : 'idle'} @100 Hz`, `${v.cpuPerTickUs.toFixed(1)} µs/tick, ${v.samplerCpuPct.toFixed(2)} %`, '-', '-', v.workers >= 256 && !v.busy ? '< 2 % of a core' : 'flat per idle thread'])
    }
    rows.push(['sampler CPU per extra idle thread', `${r.scale.costPerIdleThreadUs.toFixed(2)} µs/tick`, '-', '-', 'flat'])
  }
  if (r.memory) rows.push([`bytes per sample (${r.memory.seconds} s @1 kHz, ${r.memory.samples} samples)`, r.memory.bytesPerSample.toFixed(1), '-', '-', 'report'])
  if (r.postProcessing) {
    const pp = r.postProcessing
    rows.push([`symbolize ${pp.samples} samples (cold / warm)`, `${pp.symbolizeColdMs.toFixed(0)} / ${pp.symbolizeWarmMs.toFixed(0)} ms`, '-', '-', '≪ 1 s'])
    rows.push([`export ${pp.samples} samples: pprof / speedscope`, `${pp.pprofMs.toFixed(0)} / ${pp.speedscopeMs.toFixed(0)} ms`, '-', '-', 'report'])
    rows.push([`symbolize ${pp.uniqueAddresses} unique addresses`, `${pp.symbolizeUniqueMs.toFixed(0)} ms`, '-', '-', '≪ 1 s'])
  }
  if (r.jsNames) {
    const j = r.jsNames
    rows.push(['sampler CPU for JS names @1 kHz (main + 3 JS workers)', `+${j.deltaUsPerTick.toFixed(1)} µs/tick (${j.offUsPerTick.toFixed(1)} -> ${j.onUsPerTick.toFixed(1)}), ${j.usPerJsSample.toFixed(2)} µs/JS sample`, '-', '-', 'report'])
    rows.push(['stop() with JS names resolved at stop / without', `${j.stopMsOn.toFixed(1)} / ${j.stopMsOff.toFixed(1)} ms`, '-', '-', 'report'])
  }
  if (r.inlineAgreement) {
    const a = r.inlineAgreement
    rows.push(['JS self time vs --cpu-prof, server with inlining (L1)', `${a.l1.toFixed(2)}; JS leaves only ${a.l1JsLeafOnly.toFixed(2)} (noise ${a.noiseL1.toFixed(2)})`, 'reference', '-', '≤ noise'])
  }
  if (r.workerStartup) {
    const w = r.workerStartup
    rows.push(['CPU per worker created while sampling: JS names', `${w.jsNamesMsPerWorker.toFixed(2)} ms (registering ${w.registerMsPerWorker.toFixed(2)} ms)`, '-', '-', '≤ 2 ms'])
  }
  if (r.unwind) {
    for (const [k, v] of Object.entries(r.unwind.kinds)) rows.push([`stacks reaching root: ${k} (busy)`, `${(v.rootedShare * 100).toFixed(1)} % (${v.busyRootedShare == null ? '-' : (v.busyRootedShare * 100).toFixed(1) + ' %'})`, '-', '-', 'report'])
  }
  const head = ['metric', 'machsampler', '--cpu-prof', 'perf', 'target']
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => String(row[i]).length)))
  const line = (cells) => cells.map((c, i) => String(c).padEnd(widths[i])).join(' | ')
  return [line(head), widths.map((w) => '-'.repeat(w)).join('-|-'), ...rows.map(line)].join('\n')
}

// ---------------------------------------------------------------------------

async function main() {
  const t0 = Date.now()
  const perfOk = perfWorks()
  const results = {
    version: 1,
    quick: QUICK,
    date: new Date().toISOString(),
    machine: {
      hostname: os.hostname(),
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      memGiB: +(os.totalmem() / 2 ** 30).toFixed(1),
      kernel: os.release(),
      platform: `${process.platform}-${process.arch}`,
    },
    versions: {
      node: process.version,
      machsampler: require(path.join(ROOT, 'package.json')).version,
      perf: tool('perf', ['--version']),
      perfUsable: perfOk === true ? true : perfOk,
    },
    config: cfg,
  }
  if (want('overhead')) overhead(results, perfOk)
  if (want('overheadAB')) overheadAB(results, perfOk)
  if (want('disruption')) disruption(results)
  if (want('rate')) rate(results)
  if (want('fidelity')) await fidelity(results, perfOk)
  if (want('scale')) scale(results)
  if (want('memory')) memoryAndPost(results)
  if (want('unwind')) unwind(results)
  if (want('jsNames')) jsNames(results)
  if (want('workerStartup')) workerStartup(results)
  if (want('inlineAgreement')) inlineAgreement(results)
  results.elapsedSeconds = (Date.now() - t0) / 1000
  const dir = path.join(__dirname, 'results')
  fs.mkdirSync(dir, { recursive: true })
  const file = path.join(dir, QUICK ? 'quick.json' : 'latest.json')
  fs.writeFileSync(file + '.tmp', JSON.stringify(results, null, 2) + '\n')
  fs.renameSync(file + '.tmp', file)
  fs.rmSync(TMP, { recursive: true, force: true })
  console.log(table(results))
  console.log(`\nresults: ${path.relative(process.cwd(), file)} (${results.elapsedSeconds.toFixed(0)} s)`)
}

module.exports = { normalizeName, table }

if (require.main === module) {
  main().catch((e) => {
    console.error(e.stack || String(e))
    process.exit(1)
  })
}
