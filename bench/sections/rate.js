'use strict'
// Rate. CPU mode: each busy thread's samples against its own CPU time
// divided by the interval (samples stand for CPU time, as perf's and
// pprof's CPU profiles do). Wall mode: ticks achieved against requested,
// and samples of an idle thread against wall time.
const path = require('path')
const { WL, runJson } = require('../lib/proc')
const { median } = require('../lib/stats')
const { pct, verdict } = require('../lib/table')

function run(ctx) {
  const seconds = ctx.cfg.rateSeconds
  const out = { note: 'CPU mode: per busy thread, samples x interval / its CPU time - 1. Wall mode: samples of the main thread (idle or busy) x interval / wall time - 1.', seconds }
  for (const hz of [1000, 100]) {
    for (const busy of [1, 3]) {
      const r = runJson(path.join(WL, 'rate.js'), { intervalMs: 1000 / hz, seconds, busy })
      const errs = r.threads.map((t) => ((t.samples * r.intervalNs) / t.cpuNs - 1) * 100)
      out[`cpu_${hz}Hz_${busy + 1}busy`] = { hz, busyThreads: busy + 1, errorsPct: errs, worstPct: errs.reduce((w, e) => (Math.abs(e) > Math.abs(w) ? e : w), 0), medianPct: median(errs), threads: r.threads }
      ctx.log(`rate cpu ${hz} Hz ${busy + 1} busy: ${errs.map((e) => e.toFixed(2)).join(' ')} %`)
    }
  }
  for (const mainBusy of [false, true]) {
    const r = runJson(path.join(WL, 'rate.js'), { intervalMs: 1, seconds, busy: 2, mode: 'wall', mainBusy })
    const main = r.threads.find((t) => t.main)
    out[`wall_1000Hz_main${mainBusy ? 'Busy' : 'Idle'}`] = {
      mainErrorPct: ((main.samples * r.intervalNs) / r.wallNs - 1) * 100,
      achievedPct: (r.ticks / (r.ticks + r.ticksMissed) - 1) * 100,
    }
  }
  return out
}

function rows(r) {
  const out = []
  for (const [k, v] of Object.entries(r)) {
    if (k.startsWith('cpu_')) {
      out.push([`rate, CPU mode ${v.hz} Hz, ${v.busyThreads} busy threads on 2 cores (${r.seconds} s): worst thread`, `${v.worstPct >= 0 ? '+' : ''}${pct(v.worstPct)} (all: ${v.errorsPct.map((e) => e.toFixed(2)).join(', ')})`, '±2 %', verdict(Math.abs(v.worstPct) <= 2)])
    } else if (k.startsWith('wall_')) {
      out.push([`rate, wall mode 1 kHz, main thread ${k.endsWith('Idle') ? 'idle' : 'busy'} + 2 busy: main thread samples vs wall time; ticks achieved`, `${pct(v.mainErrorPct)}; ${pct(v.achievedPct)}`, '±2 %', verdict(Math.abs(v.mainErrorPct) <= 2)])
    }
  }
  return out
}

module.exports = { name: 'rate', run, rows }
