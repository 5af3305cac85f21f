'use strict'
// Throughput lost to each profiler, one process per run. Configurations
// are interleaved round by round (the order rotates), and each round's
// throughput is divided by that round's run without a profiler: the
// median of those ratios is reported with its spread. CPU per operation
// (perf's own process included) is reported next to it, as it is less
// sensitive to the machine's other tenants.
const fs = require('fs')
const env = require('../../lib/env.js')
const path = require('path')
const { WL, runNode } = require('../lib/proc')
const { median, spread } = require('../lib/stats')
const { pct, pctSpread, verdict } = require('../lib/table')

// (a) a short-lived process with several isolates, oversubscribed;
// (b) a longer run that fits the cores; (c) the libuv pool.
const WORKLOADS = [
  { key: 'a', what: '4 busy threads on 2 cores, 3 s', script: 'cpu.js', env: { BENCH_WORKERS: '3' }, seconds: 3, quickSeconds: 1.5 },
  { key: 'b', what: '2 busy threads, 10 s', script: 'cpu.js', env: { BENCH_WORKERS: '1' }, seconds: 10, quickSeconds: 2 },
  { key: 'c', what: 'libuv pool (8 pbkdf2 in flight), 3 s', script: 'pool.js', env: {}, seconds: 3, quickSeconds: 1.5 },
]

/** The flags `machsampler record` adds to node for V8's code log. */
function v8LogFlags(logfile) {
  fs.mkdirSync(path.dirname(logfile), { recursive: true })
  return env.v8LogFlags(process.execPath, logfile)
}

function configs(ctx) {
  const out = [
    { name: 'none', label: 'no profiler', env: {} },
    { name: 'ms100', label: 'machsampler 100 Hz', env: { BENCH_SAMPLER_INTERVAL: '10' } },
    { name: 'ms1k', label: 'machsampler 1 kHz', env: { BENCH_SAMPLER_INTERVAL: '1' } },
    { name: 'ms1kNoJs', label: 'machsampler 1 kHz, jsNames: false', env: { BENCH_SAMPLER_INTERVAL: '1', BENCH_JS_NAMES: '0' } },
    // As `machsampler record` runs node: V8 logs its code, so that inlined
    // functions are split out (the log is read at stop()).
    { name: 'ms1kV8Log', label: "machsampler 1 kHz with V8's code log (record's default)", env: { BENCH_SAMPLER_INTERVAL: '1', MACHSAMPLER_V8_LOG: path.join(ctx.tmp, 'v8log', 'v8.log') }, nodeArgs: v8LogFlags(path.join(ctx.tmp, 'v8log', 'v8.log')) },
    { name: 'cpuProf1k', label: '--cpu-prof 1 kHz', nodeArgs: ['--cpu-prof', '--cpu-prof-interval', '1000', '--cpu-prof-dir', path.join(ctx.tmp, 'cpuprof')] },
  ]
  try {
    require.resolve('@datadog/pprof')
    out.push({ name: 'ddpprof1k', label: '@datadog/pprof 1 kHz', env: { BENCH_DDPPROF_INTERVAL: '1' } })
  } catch {
    // Not installed: its column says so.
  }
  if (ctx.perfOk === true) {
    // /usr/bin/time measures perf and node together; node reports its own
    // CPU, so perf's is the difference (its start and exit-time work too).
    const timed = fs.existsSync('/usr/bin/time')
    const wrap = [...(timed ? ['/usr/bin/time', '-f', '%U %S', '-o', path.join(ctx.tmp, 'perf.time')] : []), 'perf', 'record', '-F', '1000', '-g', '-q', '-o', path.join(ctx.tmp, 'perf.data'), '--']
    out.push({ name: 'perf1k', label: 'perf record -F 1000 -g', wrap, timed })
  }
  return out
}

function run(ctx) {
  const cs = configs(ctx)
  const out = { note: 'Median throughput loss against the same round without a profiler; one process per run, configurations interleaved (rotating order).', rounds: ctx.cfg.overheadRounds, configs: Object.fromEntries(cs.map((c) => [c.name, c.label])) }
  for (const w of WORKLOADS) {
    const seconds = ctx.quick ? w.quickSeconds : w.seconds
    const ratios = Object.fromEntries(cs.map((c) => [c.name, []]))
    const cpuRatios = Object.fromEntries(cs.map((c) => [c.name, []]))
    const samplerCpu = Object.fromEntries(cs.map((c) => [c.name, []]))
    // Stacks taken per second of the workload's CPU: in CPU mode the
    // kernel's tick bounds it (250/s on a HZ=250 kernel, whatever the
    // interval), so at 1 kHz machsampler takes fewer stacks than perf.
    const stacks = Object.fromEntries(cs.map((c) => [c.name, []]))
    for (let round = 0; round < ctx.cfg.overheadRounds; round++) {
      const order = cs.map((_, i) => cs[(i + round) % cs.length])
      const got = {}
      for (const c of order) {
        const r = runNode(path.join(WL, w.script), { env: { ...w.env, BENCH_SECONDS: String(seconds), ...c.env }, nodeArgs: c.nodeArgs || [], wrap: c.wrap || null })
        if (c.timed) {
          const [u, s] = fs.readFileSync(path.join(ctx.tmp, 'perf.time'), 'utf8').trim().split('\n').pop().split(' ').map(Number)
          r.toolCpuSec = Math.max(0, u + s - r.processCpuSec)
        }
        if (r.stats) samplerCpu[c.name].push(((r.stats.samplerCpuNs + r.stats.totalSuspendNs) / 1e9 / r.cpuSec) * 100)
        if (r.rows) stacks[c.name].push(r.rows / r.cpuSec)
        got[c.name] = r
      }
      const cpuPerOp = (r) => (r.cpuSec + (r.toolCpuSec || 0)) / r.ops
      for (const c of cs) {
        ratios[c.name].push(got[c.name].opsPerSec / got.none.opsPerSec)
        cpuRatios[c.name].push(cpuPerOp(got[c.name]) / cpuPerOp(got.none))
      }
      ctx.log(`overhead (${w.key}) round ${round + 1}/${ctx.cfg.overheadRounds}: ${cs.map((c) => `${c.name}=${ratios[c.name][round].toFixed(3)}`).join(' ')}`)
    }
    out[w.key] = { what: w.what, seconds }
    for (const c of cs) {
      const loss = ratios[c.name].map((x) => (1 - x) * 100)
      out[w.key][c.name] = {
        lossPct: median(loss),
        lossSpread: spread(loss),
        cpuPerOpPct: (median(cpuRatios[c.name]) - 1) * 100,
        cpuPerOpSpread: spread(cpuRatios[c.name].map((x) => (x - 1) * 100)),
        directCostPct: samplerCpu[c.name].length ? median(samplerCpu[c.name]) : null,
        stacksPerCpuSec: stacks[c.name].length ? median(stacks[c.name]) : null,
      }
    }
  }
  return out
}

function rows(r) {
  const out = []
  for (const w of WORKLOADS) {
    const x = r[w.key]
    if (!x) continue
    const others = ['perf1k', 'cpuProf1k', 'ddpprof1k'].filter((k) => x[k])
    for (const k of Object.keys(r.configs)) {
      if (k === 'none' || !x[k]) continue
      let target = ''
      let ok = null
      if (k === 'ms1k') {
        const worst = Math.min(...others.map((o) => x[o].lossPct))
        target = `< ${others.join(', ')} (best of them ${pct(worst)})`
        ok = others.length ? x.ms1k.lossPct < worst : null
      } else if (k === 'ms100' && w.key !== 'c') {
        target = '≤ 1 % (aim 0.5 %)'
        ok = x.ms100.lossPct <= 1
      }
      const direct = x[k].directCostPct != null ? `; sampler+handlers ${x[k].directCostPct.toFixed(2)} % of CPU` : ''
      const taken = x[k].stacksPerCpuSec != null ? `; ${Math.round(x[k].stacksPerCpuSec)} stacks per CPU-second` : ''
      out.push([`overhead (${w.key}) ${x.what}: ${r.configs[k]}`, `${pctSpread(x[k].lossPct, x[k].lossSpread)}; CPU/op ${pct(x[k].cpuPerOpPct)}${direct}${taken}`, target, verdict(ok)])
    }
  }
  return out
}

module.exports = { name: 'overhead', run, rows }
