'use strict'
// Overhead as on/off phases inside one process (workloads/toggle.js says
// why): each configuration against the "off" phase of the same cycle.
const path = require('path')
const { WL, runNode } = require('../lib/proc')
const { median, spread } = require('../lib/stats')
const { pctSpread } = require('../lib/table')

const LABELS = { ms100: 'machsampler 100 Hz', ms1k: 'machsampler 1 kHz', v8prof1k: "V8's profiler 1 kHz (inspector)", perf1k: 'perf record -F 1000 -g' }

function run(ctx) {
  const phases = ['off', 'ms100', 'ms1k', 'v8prof1k', ...(ctx.perfOk === true ? ['perf1k'] : [])]
  const out = { note: "Throughput in on/off phases of one process (500 ms phases, the first 100 ms not counted), the configurations rotated each cycle; ratio to the same cycle's off phase, median of the cycles." }
  for (const workload of ['cpu', 'pool']) {
    const r = runNode(path.join(WL, 'toggle.js'), {
      env: { BENCH_WORKLOAD: workload, BENCH_PHASES: phases.join(','), BENCH_CYCLES: String(ctx.cfg.abCycles), BENCH_PERF_OUT: path.join(ctx.tmp, 'ab.perf.data') },
    })
    out[workload] = Object.fromEntries(
      phases.slice(1).map((p) => {
        const loss = r.rates[p].map((x, i) => (1 - x / r.rates.off[i]) * 100)
        return [p, { lossPct: median(loss), lossSpread: spread(loss) }]
      }),
    )
    ctx.log(`overhead A/B ${workload}: ${phases.slice(1).map((p) => `${p}=${out[workload][p].lossPct.toFixed(2)}%`).join(' ')}`)
  }
  return out
}

function rows(r) {
  const out = []
  for (const w of ['cpu', 'pool']) {
    if (!r[w]) continue
    for (const [p, x] of Object.entries(r[w])) out.push([`in-process A/B, ${w}: ${LABELS[p]}`, pctSpread(x.lossPct, x.lossSpread), '', ''])
  }
  return out
}

module.exports = { name: 'overheadAB', run, rows }
