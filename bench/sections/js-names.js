'use strict'
// The sampler thread's CPU for JavaScript names: the same workload (main +
// 3 workers of JS at 1 kHz) with jsNames on and off, interleaved; the
// difference per tick and per JS sample, and stop()'s time (where names
// are resolved).
const path = require('path')
const { WL, runJson } = require('../lib/proc')
const { median, spread } = require('../lib/stats')

function run(ctx) {
  const seconds = ctx.quick ? 1.5 : 3
  const on = []
  const off = []
  for (let i = 0; i < ctx.cfg.rounds; i++) {
    on.push(runJson(path.join(WL, 'jsnames-cost.js'), { js: true, ms: seconds * 1000 }))
    off.push(runJson(path.join(WL, 'jsnames-cost.js'), { js: false, ms: seconds * 1000 }))
  }
  const perTick = (r) => r.samplerCpuNs / Math.max(1, r.ticks) / 1000
  const deltas = on.map((r, i) => perTick(r) - perTick(off[i]))
  const perJsSample = on.map((r, i) => ((perTick(r) - perTick(off[i])) * r.ticks) / Math.max(1, r.jsSamples))
  const out = {
    note: 'Sampler-thread CPU per wake-up at 1 kHz, main + 3 workers of JS, jsNames on vs off in interleaved runs; stop() wall time with names resolved at stop.',
    seconds,
    onUsPerTick: median(on.map(perTick)),
    offUsPerTick: median(off.map(perTick)),
    deltaUsPerTick: median(deltas),
    deltaSpread: spread(deltas),
    usPerJsSample: median(perJsSample),
    jsSamples: median(on.map((r) => r.jsSamples)),
    stopMsOn: median(on.map((r) => r.stopNs / 1e6)),
    stopMsOnSpread: spread(on.map((r) => r.stopNs / 1e6)),
    stopMsOff: median(off.map((r) => r.stopNs / 1e6)),
  }
  ctx.log(`jsNames ${JSON.stringify(out)}`)
  return out
}

function rows(j) {
  return [
    ['sampler CPU for JS names @1 kHz (main + 3 JS workers)', `${j.deltaUsPerTick >= 0 ? '+' : ''}${j.deltaUsPerTick.toFixed(1)} µs/wake [${j.deltaSpread.min.toFixed(1)}..${j.deltaSpread.max.toFixed(1)}] (${j.offUsPerTick.toFixed(1)} -> ${j.onUsPerTick.toFixed(1)}), ${j.usPerJsSample.toFixed(2)} µs/JS sample`, 'names off the per-sample path', ''],
    ['stop() with JS names resolved at stop / without', `${j.stopMsOn.toFixed(1)} / ${j.stopMsOff.toFixed(1)} ms (${j.jsSamples} JS samples)`, '', ''],
  ]
}

module.exports = { name: 'jsNames', run, rows }
