'use strict'
// CPU added per worker created while sampling: workers created one after
// another (each runs a little JS), with no sampler, jsNames off and on,
// interleaved; plus the CPU of registering each (its interrupt, code-event
// install included).
const path = require('path')
const { WL, runJson } = require('../lib/proc')
const { median, spread } = require('../lib/stats')
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
  const reg = modes.js.map((r) => r.v8.discovery.registerCpuNs / Math.max(1, r.v8.discovery.registered) / 1e6)
  const out = {
    note: 'CPU ms per worker created while sampling at 1 kHz; differences taken within a round (sampling with names minus no sampler; names on minus off); registration CPU measured in the registering interrupt.',
    workers,
    rounds: ctx.cfg.rounds,
    offMsPerWorker: median(modes.off.map(per)),
    nojsMsPerWorker: median(modes.nojs.map(per)),
    jsMsPerWorker: median(modes.js.map(per)),
    samplingMsPerWorker: median(sampling),
    samplingSpread: spread(sampling),
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
  return [
    ['CPU per worker created while sampling (1 kHz, names on, vs no sampler)', `${f(w.samplingMsPerWorker, w.samplingSpread)} (worker alone ${w.offMsPerWorker.toFixed(2)} ms)`, '≤ 2 ms', verdict(w.samplingMsPerWorker <= 2)],
    ['  of which JS names (names on vs off); registering', `${f(w.jsNamesMsPerWorker, w.jsNamesSpread)}; ${w.registerMsPerWorker.toFixed(3)} ms`, '', ''],
  ]
}

module.exports = { name: 'workerStartup', run, rows }
