'use strict'
// CPU added per worker created while sampling: workers created one after
// another (each runs a little JS), with no sampler, jsNames off and on,
// interleaved, one process per run; the same as blocks with and without
// sampling alternated inside one process (a process's JIT and memory
// layout make its speed vary from one process to the next); plus the CPU
// of registering each (its interrupt, code-event install included).
const path = require('path')
const { WL, runJson } = require('../lib/proc')
const { median, spread, percentile } = require('../lib/stats')
const { verdict } = require('../lib/table')

function run(ctx) {
  const workers = ctx.quick ? 10 : 30
  const modes = { off: [], nojs: [], js: [] }
  for (let i = 0; i < ctx.cfg.rounds; i++) {
    for (const mode of Object.keys(modes)) modes[mode].push(runJson(path.join(WL, 'worker-startup.js'), { mode, workers }))
  }
  const per = (r) => r.cpuUs / r.workers / 1000
  const sampling = modes.js.map((r, i) => per(r) - per(modes.off[i]))
  const jsVsNojs = modes.js.map((r, i) => per(r) - per(modes.nojs[i]))
  // In-process blocks of 5 workers, sampling on and off alternated; names
  // on (the default) and off, in alternate processes.
  const ab = { js: [], nojs: [] }
  for (let i = 0; i < ctx.cfg.rounds; i++) {
    for (const names of ['js', 'nojs']) {
      const r = runJson(path.join(WL, 'worker-startup.js'), { mode: 'ab', pairs: ctx.quick ? 4 : 10, workers: 5, jsNames: names === 'js' })
      r.onUs.forEach((on, k) => ab[names].push((on - r.offUs[k]) / r.workers / 1000))
    }
  }
  // Single blocks vary by ±10 ms per worker on a shared VM: the median of
  // many pairs, with the quartiles.
  const quartiles = (xs) => {
    const s = [...xs].sort((a, b) => a - b)
    return { q1: percentile(s, 0.25), q3: percentile(s, 0.75), n: s.length }
  }
  const reg = modes.js.map((r) => r.v8.discovery.registerCpuNs / Math.max(1, r.v8.discovery.registered) / 1e6)
  const out = {
    note: 'CPU ms per worker created while sampling at 1 kHz; differences taken within a round (sampling with names minus no sampler; names on minus off), and within one process (inProcess: blocks of 5 workers, sampling on minus the off block of the same pair); registration CPU measured in the registering interrupt.',
    workers,
    rounds: ctx.cfg.rounds,
    offMsPerWorker: median(modes.off.map(per)),
    nojsMsPerWorker: median(modes.nojs.map(per)),
    jsMsPerWorker: median(modes.js.map(per)),
    samplingMsPerWorker: median(sampling),
    samplingSpread: spread(sampling),
    inProcessMsPerWorker: median(ab.js),
    inProcessQuartiles: quartiles(ab.js),
    inProcessNoJsMsPerWorker: median(ab.nojs),
    inProcessNoJsQuartiles: quartiles(ab.nojs),
    jsNamesMsPerWorker: median(jsVsNojs),
    jsNamesSpread: spread(jsVsNojs),
    registerMsPerWorker: median(reg),
    registeredPerRun: median(modes.js.map((r) => r.v8.discovery.registered)),
  }
  ctx.log(`workerStartup ${JSON.stringify(out)}`)
  return out
}

function rows(w) {
  const f = (m, s) => `${m.toFixed(2)} ms [${s.min.toFixed(2)}..${s.max.toFixed(2)}]`
  const q = (m, s) => `${m.toFixed(2)} ms (quartiles ${s.q1.toFixed(2)}..${s.q3.toFixed(2)}, ${s.n} pairs)`
  if (!w.inProcessQuartiles) {
    return [['CPU per worker created while sampling (1 kHz, names on, vs no sampler)', `${f(w.samplingMsPerWorker, w.samplingSpread)} (worker alone ${w.offMsPerWorker.toFixed(2)} ms)`, '≤ 2 ms', verdict(w.samplingMsPerWorker <= 2)]]
  }
  return [
    ['CPU per worker created while sampling (1 kHz, names on; in one process, vs no sampler)', `${q(w.inProcessMsPerWorker, w.inProcessQuartiles)} (worker alone ${w.offMsPerWorker.toFixed(2)} ms)`, '≤ 2 ms', verdict(w.inProcessMsPerWorker <= 2)],
    ['  the same with JS names off', q(w.inProcessNoJsMsPerWorker, w.inProcessNoJsQuartiles), '', ''],
    ['  one process per run (names on vs none; names on vs off); registering', `${f(w.samplingMsPerWorker, w.samplingSpread)}; ${f(w.jsNamesMsPerWorker, w.jsNamesSpread)}; ${w.registerMsPerWorker.toFixed(3)} ms`, '', ''],
  ]
}

module.exports = { name: 'workerStartup', run, rows }
