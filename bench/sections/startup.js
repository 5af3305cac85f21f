'use strict'
// Start-up: how long start() blocks its caller, and the time from start()
// to the first sample, with one busy worker (the main thread waits), in
// CPU and wall mode, one process per run, modes interleaved.
const path = require('path')
const { WL, runJson } = require('../lib/proc')
const { median, spread } = require('../lib/stats')
const { verdict } = require('../lib/table')

function run(ctx) {
  const rounds = ctx.quick ? 5 : 15
  const runs = { cpu: [], wall: [] }
  for (let i = 0; i < rounds; i++) {
    for (const mode of Object.keys(runs)) runs[mode].push(runJson(path.join(WL, 'sampler-cpu.js'), { intervalMs: 1, seconds: 0.2, busy: 1, mode, warmMs: 0 }))
  }
  const out = { note: 'start() blocking time and start() to the first sample (profile start time to the earliest sample), 1 kHz, one busy worker; median of one-process runs with [min..max].', rounds }
  for (const [mode, rs] of Object.entries(runs)) {
    const first = rs.map((r) => r.firstSampleMs)
    const start = rs.map((r) => r.startMs)
    out[mode] = { firstSampleMs: median(first), firstSampleSpread: spread(first), startMs: median(start), startSpread: spread(start) }
  }
  ctx.log(`startup ${JSON.stringify(out)}`)
  return out
}

function rows(r) {
  const ms = (m, s) => (m == null ? '-' : `${m.toFixed(2)} ms [${s.min.toFixed(2)}..${s.max.toFixed(2)}]`)
  const out = []
  for (const mode of ['cpu', 'wall']) {
    const x = r[mode]
    out.push([`start() to first sample, ${mode} mode`, ms(x.firstSampleMs, x.firstSampleSpread), '≤ 5 ms', verdict(x.firstSampleMs != null && x.firstSampleMs <= 5)])
    out.push([`start() blocking the caller, ${mode} mode`, ms(x.startMs, x.startSpread), '', ''])
  }
  return out
}

module.exports = { name: 'startup', run, rows }
