#!/usr/bin/env node
'use strict'
// The stall watcher's figures, as a bench section:
//   module.exports = { run: async (ctx) => result, rows: (result) => [...] }
// and standalone: `node bench/sections/stalls.js [--quick]` prints the result and its
// rows as JSON. Needs the testing build (npm run build:testing).
//
// - cost: throughput of bench/workloads/cpu.js's kernel (the main thread and
//   3 workers) with watchStalls({ intervalMs: 10 }) on and off, as phases
//   inside one process (a process's JIT makes its speed vary more from one
//   process to the next than the effect measured; bench/workloads/toggle.js),
//   the order rotated each cycle, each "on" phase against the "off" phases
//   around it; median and spread of the cycles. Process CPU per operation
//   the same way.
// - memory: the watcher's history for keepMs 60000 at 100 Hz with 50
//   threads. Exactly those parameters, through the history the watcher uses
//   (__stallHistoryMemory: every thread sampled every 10 ms, stacks drawn at
//   random so rows rarely merge); and a real process with 50 busy threads
//   (main, 4 workers, 45 libuv pool threads in pbkdf2) watched for keepMs,
//   its history's bytes and the process's RSS growth.
// - detection: 300 ms blocks (native pbkdf2Sync and busy JS), each in a
//   fresh process: stalls reported, duration error against the block the
//   program timed, whether the summary names the blocking function, and the
//   latency from the loop turning to onStall.
// Nothing passes or fails here; each row says whether its target was met.

const { spawnSync } = require('child_process')
const path = require('path')
const { verdict } = require('../lib/table')

const ROOT = path.join(__dirname, '..', '..')
const FIXTURE = path.join(ROOT, '__test__', 'fixtures', 'stalls.js')
const MB = 1 << 20

const TARGETS = {
  costPct: 0.5,
  memoryMB: 16,
  durationErrorPct: 10,
  latencyMs: 50,
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  if (!s.length) return null
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

function spread(xs) {
  return xs.length ? { min: Math.min(...xs), max: Math.max(...xs), n: xs.length } : null
}

function node(args, { env = {}, timeoutMs = 600000 } = {}) {
  const r = spawnSync(process.execPath, args, { env: { ...process.env, ...env }, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 256 << 20 })
  if (r.status !== 0) throw new Error(`node ${args.join(' ')} failed (${r.status} ${r.signal}): ${(r.stderr || '').slice(-2000)}`)
  return r.stdout.trim().split('\n').map((l) => JSON.parse(l))
}

// ---------------------------------------------------------------------------
// child processes: `node bench/sections/stalls.js --child <name> '<json>'`

const CHILDREN = {
  // On/off phases of the watcher on the CPU workload; prints ops/s and CPU/op per phase.
  async cost(o) {
    const { Worker } = require('worker_threads')
    const { kernel } = require('../workloads/common')
    const ms = require(ROOT)
    const shared = new Int32Array(new SharedArrayBuffer(16 * 4))
    const body = `
      const { workerData } = require('worker_threads')
      const { kernel } = require(${JSON.stringify(path.join(ROOT, 'bench', 'workloads', 'common.js'))})
      const shared = new Int32Array(workerData.sab)
      while (Atomics.load(shared, 0) === 0) { for (let k = 0; k < 5; k++) kernel(); Atomics.add(shared, 1 + workerData.i, 5) }`
    const workers = Array.from({ length: o.workers }, (_, i) => new Worker(body, { eval: true, workerData: { sab: shared.buffer, i: i + 1 } }))
    let mainOps = 0
    const total = () => {
      let s = mainOps
      for (let i = 2; i < 16; i++) s += Atomics.load(shared, i)
      return s
    }
    // The main thread's share, yielding every ~10 ms: a responsive loop.
    const work = async (msLong) => {
      const end = Date.now() + msLong
      while (Date.now() < end) {
        const slice = Date.now() + 10
        while (Date.now() < slice) {
          kernel()
          mainOps++
        }
        await new Promise((r) => setImmediate(r))
      }
    }
    await work(1000) // JIT settles, workers start
    const rates = { off: [], on: [] }
    const cpu = { off: [], on: [] }
    let stalls = 0
    for (let c = 0; c < o.cycles; c++) {
      for (const phase of c % 2 ? ['on', 'off'] : ['off', 'on']) {
        const w = phase === 'on' ? ms.watchStalls({ thresholdMs: 200, keepMs: 5000, intervalMs: 10, onStall: () => stalls++ }) : null
        await work(o.settleMs)
        const [ops0, t0, c0] = [total(), process.hrtime.bigint(), process.cpuUsage()]
        await work(o.phaseMs - o.settleMs)
        const [ops1, t1, c1] = [total(), process.hrtime.bigint(), process.cpuUsage(c0)]
        rates[phase].push((ops1 - ops0) / (Number(t1 - t0) / 1e9))
        cpu[phase].push((c1.user + c1.system) / 1e6 / (ops1 - ops0))
        if (w) w.close()
      }
    }
    Atomics.store(shared, 0, 1)
    await Promise.all(workers.map((w) => w.terminate()))
    process.stdout.write(JSON.stringify({ rates, cpu, stalls }) + '\n')
  },

  // 50 busy threads watched for keepMs: history bytes and RSS growth.
  async memory(o) {
    const crypto = require('crypto')
    const { Worker } = require('worker_threads')
    const ms = require(ROOT)
    let stop = false
    const pump = () => {
      if (stop) return
      crypto.pbkdf2('password', 'salt', 50000, 32, ['sha256', 'sha512', 'sha1'][Math.floor(Math.random() * 3)], pump)
    }
    for (let i = 0; i < o.pool; i++) pump()
    const body = `
      const { workerData } = require('worker_threads')
      const f = [(x) => Math.sqrt(x), (x) => JSON.stringify({ x }).length, (x) => String(x).split('').length]
      const end = Date.now() + workerData.ms
      let x = 0
      while (Date.now() < end) for (let i = 0; i < 1000; i++) x += f[i % 3](x + i) % 7`
    const workers = Array.from({ length: o.workers }, () => new Worker(body, { eval: true, workerData: { ms: o.seconds * 1000 + 5000 } }))
    await new Promise((r) => setTimeout(r, 1000))
    global.gc && global.gc()
    const rss0 = process.memoryUsage().rss
    const w = ms.watchStalls({ thresholdMs: 1000, keepMs: o.keepMs, intervalMs: 10, warmSymbols: false, onStall: () => {} })
    const series = []
    const t0 = Date.now()
    while (Date.now() - t0 < o.seconds * 1000) {
      await new Promise((r) => setTimeout(r, 1000))
      const s = w.stats()
      series.push({ s: (Date.now() - t0) / 1000, historyBytes: s.historyBytes, historyRows: s.historyRows, rss: process.memoryUsage().rss - rss0 })
      // The main thread busy too, between turns.
      const end = Date.now() + 5
      while (Date.now() < end);
    }
    const stats = w.stats()
    w.close()
    stop = true
    await Promise.all(workers.map((x) => x.terminate()))
    process.stdout.write(JSON.stringify({ series, stats, threads: 1 + o.workers + o.pool }) + '\n')
  },
}

// ---------------------------------------------------------------------------
// the section

async function cost(ctx) {
  const cycles = ctx.quick ? 6 : 20
  const [r] = node([__filename, '--child', 'cost', JSON.stringify({ cycles, phaseMs: 500, settleMs: 100, workers: 3 })])
  // Each "on" phase against the mean of the "off" phases either side of it.
  const ratio = (xs, i) => {
    const offs = [xs.off[i], xs.off[i + 1]].filter((x) => x !== undefined)
    return xs.on[i] / (offs.reduce((a, b) => a + b, 0) / offs.length)
  }
  const throughput = r.rates.on.map((_, i) => ratio(r.rates, i))
  const cpuPerOp = r.cpu.on.map((_, i) => ratio(r.cpu, i))
  return {
    note: 'cpu.js kernel, main + 3 workers; watchStalls({intervalMs: 10}) on/off in 500 ms phases of one process (first 100 ms not counted), order alternated; on vs the off phases around it.',
    throughputLossPct: (1 - median(throughput)) * 100,
    throughputSpread: spread(throughput),
    cpuPerOpIncreasePct: (median(cpuPerOp) - 1) * 100,
    cpuPerOpSpread: spread(cpuPerOp),
    falseStalls: r.stalls,
  }
}

async function memory(ctx) {
  // Test entry points are on the binding itself (testing build only).
  const addon = require(path.join(ROOT, 'binding.js'))
  if (typeof addon.__stallHistoryMemory !== 'function') throw new Error('needs the testing build: npm run build:testing')
  // 20 distinct stacks per thread (a busy thread of an app), and 200 (a
  // pessimistic one: 10,000 stacks of 40 frames in the window).
  const exact = JSON.parse(addon.__stallHistoryMemory(50, 100, 75, 60000, 20, 40))
  const pessimistic = JSON.parse(addon.__stallHistoryMemory(50, 100, 75, 60000, 200, 40))
  const seconds = ctx.quick ? 10 : 70
  const [real] = node(['--expose-gc', __filename, '--child', 'memory', JSON.stringify({ seconds, keepMs: 60000, workers: 4, pool: 45 })], {
    env: { UV_THREADPOOL_SIZE: '45' },
  })
  const last = real.series[real.series.length - 1]
  const half = real.series[Math.floor(real.series.length / 2)]
  return {
    note: 'keepMs 60000. exact: the history as the watcher keeps it, 50 threads each sampled every 10 ms for 75 s, 20 (pessimistic: 200) stacks of 40 frames per thread drawn at random for each sample. process: main + 4 JS workers + 45 pool threads in pbkdf2, watched for the whole window; on 2 cores the sampler thread is one of 51 runnable threads and does not keep 100 Hz there.',
    exact: { bytes: exact.bytes, peakBytes: exact.peakBytes, rows: exact.rows, truncated: exact.truncated },
    pessimistic: { bytes: pessimistic.bytes, peakBytes: pessimistic.peakBytes, rows: pessimistic.rows, truncated: pessimistic.truncated },
    process: {
      seconds,
      threads: real.threads,
      historyBytes: last.historyBytes,
      historyRows: last.historyRows,
      historyBytesAtHalf: half.historyBytes,
      rssGrowthBytes: last.rss,
      truncated: real.stats.historyTruncated,
    },
  }
}

async function detection(ctx) {
  const rounds = ctx.quick ? 2 : 5
  const out = {}
  for (const kind of ['native', 'js']) {
    const runs = []
    for (let i = 0; i < rounds; i++) {
      const [r] = node([FIXTURE, 'block', JSON.stringify({ kind, ms: 300, thresholdMs: 100, keepMs: 5000 })], { env: { MACHSAMPLER_ALLOC_CHECK: '1' } })
      runs.push(r)
    }
    const blocking = kind === 'js' ? 'spinBusy' : 'pbkdf2Sync'
    const errs = runs.filter((r) => r.stalls.length === 1).map((r) => (Math.abs(r.stalls[0].durationMs - r.block.durationMs) / r.block.durationMs) * 100)
    const latencies = runs.flatMap((r) => r.stalls.map((s) => s.latencyMs))
    out[kind] = {
      rounds,
      blockMs: median(runs.map((r) => r.block.durationMs)),
      stallsPerBlock: runs.map((r) => r.stalls.length),
      durationErrorPctMax: errs.length ? Math.max(...errs) : null,
      durationErrorPct: spread(errs),
      namesBlockingFunction: runs.every((r) => r.stalls.length > 0 && r.stalls.every((s) => s.summary.includes(blocking))),
      latencyMsMedian: median(latencies),
      latencyMsMax: latencies.length ? Math.max(...latencies) : null,
    }
  }
  const seconds = ctx.quick ? 5 : 60
  const [server] = node([FIXTURE, 'server', JSON.stringify({ seconds, thresholdMs: 200 })], { env: { MACHSAMPLER_ALLOC_CHECK: '1' } })
  out.server = { seconds, falseStalls: server.stalls.length, ticks: server.ticks, requests: server.requests }
  return out
}

async function run(ctx = {}) {
  const result = { date: new Date().toISOString(), quick: Boolean(ctx.quick) }
  const log = ctx.log || ((...m) => process.stderr.write(m.join(' ') + '\n'))
  log('stalls: cost')
  result.cost = await cost(ctx)
  log('stalls: memory')
  result.memory = await memory(ctx)
  log('stalls: detection')
  result.detection = await detection(ctx)
  return result
}

function rows(r) {
  const out = []
  const row = (metric, measured, target, met) => out.push([metric, measured, target, verdict(met)])
  const pct = (x) => `${x.toFixed(2)} %`
  const range = (s, f) => (s ? ` (${f(s.min)} .. ${f(s.max)}, n=${s.n})` : '')
  if (r.cost) {
    const loss = r.cost.throughputLossPct
    row('stalls: always-on throughput loss, intervalMs 10', `${pct(loss)}${range(r.cost.throughputSpread, (x) => pct((1 - x) * 100))}`, `<= ${TARGETS.costPct} %`, loss <= TARGETS.costPct)
    row('stalls: always-on CPU per operation', `${pct(r.cost.cpuPerOpIncreasePct)}${range(r.cost.cpuPerOpSpread, (x) => pct((x - 1) * 100))}`, 'shown', true)
  }
  if (r.memory) {
    for (const [key, stacks] of [['exact', 20], ['pessimistic', 200]]) {
      const e = r.memory[key]
      const cut = e.truncated ? `, ${e.truncated} chunks dropped at the 64 MB limit` : ''
      row(`stalls: history memory, keepMs 60000, 100 Hz, 50 threads, ${stacks} stacks/thread`, `${(e.peakBytes / MB).toFixed(1)} MB peak, ${e.rows} rows${cut}`, `<= ${TARGETS.memoryMB} MB`, e.peakBytes <= TARGETS.memoryMB * MB && e.truncated === 0)
    }
    const p = r.memory.process
    row(`stalls: history memory, ${p.threads} busy threads, ${p.seconds} s`, `${(p.historyBytes / MB).toFixed(1)} MB (${(p.historyBytesAtHalf / MB).toFixed(1)} MB at half), RSS +${(p.rssGrowthBytes / MB).toFixed(1)} MB`, `<= ${TARGETS.memoryMB} MB`, p.historyBytes <= TARGETS.memoryMB * MB)
  }
  if (r.detection) {
    for (const kind of ['native', 'js']) {
      const d = r.detection[kind]
      if (!d) continue
      const once = d.stallsPerBlock.every((n) => n === 1)
      row(`stalls: 300 ms ${kind} block reported once`, `${d.stallsPerBlock.join(',')} stalls (blocks ${d.blockMs.toFixed(0)} ms)`, '1 each', once)
      row(`stalls: 300 ms ${kind} block duration error`, d.durationErrorPctMax === null ? 'none reported' : `max ${pct(d.durationErrorPctMax)}`, `<= ${TARGETS.durationErrorPct} %`, d.durationErrorPctMax !== null && d.durationErrorPctMax <= TARGETS.durationErrorPct)
      row(`stalls: 300 ms ${kind} block summary names the blocking function`, String(d.namesBlockingFunction), 'true', d.namesBlockingFunction)
      row(`stalls: ${kind} report latency after the loop turns`, d.latencyMsMax === null ? 'none' : `median ${d.latencyMsMedian.toFixed(1)} ms, max ${d.latencyMsMax.toFixed(1)} ms`, `<= ${TARGETS.latencyMs} ms`, d.latencyMsMax !== null && d.latencyMsMax <= TARGETS.latencyMs)
    }
    const s = r.detection.server
    row(`stalls: false stalls, busy server for ${s.seconds} s`, `${s.falseStalls} (${s.ticks} timer ticks, ${s.requests} requests)`, '0', s.falseStalls === 0)
  }
  return out
}

module.exports = { name: 'stalls', run, rows }

if (require.main === module) {
  const i = process.argv.indexOf('--child')
  if (i >= 0) {
    CHILDREN[process.argv[i + 1]](JSON.parse(process.argv[i + 2] || '{}')).then(
      () => process.exit(0),
      (e) => {
        console.error(e)
        process.exit(1)
      },
    )
  } else {
    run({ quick: process.argv.includes('--quick') }).then(
      (result) => process.stdout.write(JSON.stringify({ result, rows: rows(result) }, null, 2) + '\n'),
      (e) => {
        console.error(e)
        process.exit(1)
      },
    )
  }
}
