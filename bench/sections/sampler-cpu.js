'use strict'
// The sampler's own CPU at 1 kHz with many threads: 4 busy workers, and N
// idle native threads (started by an LD_PRELOAD constructor before Node
// runs, as another library's thread pool would be). In CPU mode idle
// threads get no timer tick, so the sampler thread only drains and lists;
// wall mode (one signal per running thread per tick) is shown beside it.
// The old figure for JS workers at 100 Hz (idle isolates, or 2 of them
// busy) is kept too: per-tick cost as isolates grow.
const path = require('path')
const { ROOT, WL, runNode, runJson, nativeThreadsEnv, writeScript } = require('../lib/proc')
const { median, spread } = require('../lib/stats')
const { pct, verdict } = require('../lib/table')

const TARGET_IDLE = 256

function once(ctx, idle, mode) {
  return runJson(path.join(WL, 'sampler-cpu.js'), { intervalMs: 1, seconds: ctx.quick ? 2 : 4, busy: 4, mode, warmMs: 1000 }, { env: idle ? nativeThreadsEnv(`idle=${idle}`) : {} })
}

const SCALE_SCRIPT = (root) => `
const ms = require(${JSON.stringify(root)})
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
    console.log(JSON.stringify({ threads: p.threads.length, ticks: s1.ticks - s0.ticks, cpuPerTickUs: cpu / Math.max(1, s1.ticks - s0.ticks) / 1000, samplerCpuPct: cpu / 1e9 / dt * 100, ticksMissed: p.stats.ticksMissed }))
    Atomics.store(new Int32Array(sab), 0, 1); Atomics.notify(new Int32Array(sab), 0)
    process.exit(0)
  }, 1000 + seconds * 1000)
}
`

function run(ctx) {
  const out = { note: 'Sampler thread CPU as % of one core, 1 kHz, 4 busy workers plus N idle native threads, measured after 1 s of warm-up; start() = how long start() blocked its caller.' }
  // The target configuration, repeated, CPU and wall mode interleaved.
  const rounds = ctx.quick ? 3 : 5
  const target = { cpu: [], wall: [] }
  for (let i = 0; i < rounds; i++) for (const mode of ['cpu', 'wall']) target[mode].push(once(ctx, TARGET_IDLE, mode))
  out.target = Object.fromEntries(
    Object.entries(target).map(([mode, rs]) => {
      const pcts = rs.map((r) => r.samplerCpuPct)
      return [mode, { samplerCpuPct: median(pcts), spread: spread(pcts), threads: median(rs.map((r) => r.threads)), usPerWake: median(rs.map((r) => r.samplerCpuPerWakeUs)), wakeUpsPerSec: median(rs.map((r) => r.wakeUps)) / (ctx.quick ? 2 : 4) }]
    }),
  )
  ctx.log(`sampler CPU 4 busy + ${TARGET_IDLE} idle: cpu ${out.target.cpu.samplerCpuPct.toFixed(3)} %, wall ${out.target.wall.samplerCpuPct.toFixed(3)} %`)
  out.scaling = {}
  for (const n of [0, 256, 2000, 10000]) {
    const r = once(ctx, n, 'cpu')
    out.scaling[n] = { idleThreads: n, threadsSeen: r.threads, startMs: r.startMs, firstSampleMs: r.firstSampleMs, samplerCpuPct: r.samplerCpuPct, usPerWake: r.samplerCpuPerWakeUs }
    ctx.log(`sampler CPU scaling ${n} idle: ${JSON.stringify(out.scaling[n])}`)
  }
  // Isolates: idle workers (or 2 busy among them) at 100 Hz, default mode.
  const script = writeScript(ctx.tmp, 'scale.js', SCALE_SCRIPT(ROOT))
  out.workers = {}
  for (const n of ctx.quick ? [8, 64] : [8, 64, 256]) {
    for (const busy of [0, 2]) out.workers[`${n}_${busy ? '2busy' : 'idle'}`] = { workers: n, busy, hz: 100, ...runNode(script, { args: [String(n), String(busy), '100', ctx.quick ? '2' : '4'] }) }
  }
  const idle = Object.values(out.workers).filter((v) => !v.busy)
  const a = idle[0]
  const b = idle[idle.length - 1]
  out.workers.costPerIdleWorkerUs = (b.cpuPerTickUs - a.cpuPerTickUs) / (b.threads - a.threads)
  return out
}

function rows(r) {
  const out = []
  const t = r.target
  const f = (x) => `${pct(x.samplerCpuPct, 3)} [${x.spread.min.toFixed(3)}..${x.spread.max.toFixed(3)}] (${x.threads} threads, ${x.usPerWake.toFixed(1)} µs per wake, ${x.wakeUpsPerSec.toFixed(0)} wakes/s)`
  out.push([`sampler thread CPU, CPU mode 1 kHz, 4 busy + ${TARGET_IDLE} idle threads`, f(t.cpu), '≤ 0.5 % of a core', verdict(t.cpu.samplerCpuPct <= 0.5)])
  out.push([`sampler thread CPU, wall mode 1 kHz, 4 busy + ${TARGET_IDLE} idle threads`, f(t.wall), '', ''])
  for (const s of Object.values(r.scaling)) {
    out.push([`CPU mode 1 kHz, 4 busy + ${s.idleThreads} idle native threads: start() / first sample / threads seen / sampler CPU`, `${s.startMs.toFixed(2)} ms / ${s.firstSampleMs == null ? '-' : s.firstSampleMs.toFixed(1) + ' ms'} / ${s.threadsSeen} / ${pct(s.samplerCpuPct, 3)}`, '', ''])
  }
  for (const v of Object.values(r.workers)) {
    if (typeof v !== 'object') continue
    out.push([`sampler CPU, ${v.threads} threads (${v.workers} workers, ${v.busy ? '2 busy' : 'idle'}) @100 Hz`, `${v.cpuPerTickUs.toFixed(1)} µs/tick, ${pct(v.samplerCpuPct)}`, '', ''])
  }
  out.push(['sampler CPU per extra idle worker @100 Hz', `${r.workers.costPerIdleWorkerUs.toFixed(3)} µs/tick`, 'flat', ''])
  return out
}

module.exports = { name: 'samplerCpu', run, rows }
