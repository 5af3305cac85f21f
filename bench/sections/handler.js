'use strict'
// How long a sampled thread is stopped per sample: from entering the
// signal handler to leaving it (the stack copy, and V8's frames while
// their layout is being learned), from the sampler's histogram (bucket
// upper edges, within 12.5 %). JS names on, as by default; the kernel's
// share (an empty signal round trip) is shown apart.
const os = require('os')
const path = require('path')
const { ROOT, WL, runNode } = require('../lib/proc')
const { percentile } = require('../lib/stats')
const { ns, verdict } = require('../lib/table')

function pick(r, busy) {
  return {
    busyThreads: busy,
    p50Ns: r.stats.suspendP50Ns,
    p99Ns: r.stats.suspendP99Ns,
    maxNs: r.stats.maxSuspendNs,
    meanNs: r.stats.totalSuspendNs / Math.max(1, r.rows),
    copyBytesPerSample: r.stats.stackBytesCopied / Math.max(1, r.stats.samplesCaptured),
    deliveryP50Ns: r.stats.deliveryP50Ns,
    deliveryP99Ns: r.stats.deliveryP99Ns,
    deliveryMaxNs: r.stats.deliveryMaxNs,
    rows: r.rows,
  }
}

function run(ctx) {
  const cores = os.cpus().length
  const seconds = String(ctx.cfg.seconds)
  const fitWorkers = String(Math.max(0, cores - 2))
  const fit = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: seconds, BENCH_WORKERS: fitWorkers, BENCH_SAMPLER_INTERVAL: '1' } })
  const fitNoJs = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: seconds, BENCH_WORKERS: fitWorkers, BENCH_SAMPLER_INTERVAL: '1', BENCH_JS_NAMES: '0' } })
  const over = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: seconds, BENCH_WORKERS: String(cores * 2), BENCH_SAMPLER_INTERVAL: '1' } })
  // Delivery (signal sent to handler running) exists in wall mode only: CPU
  // mode's signals come from the kernel's timers, not from the sampler.
  const overWall = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: seconds, BENCH_WORKERS: String(cores * 2), BENCH_SAMPLER_INTERVAL: '1', BENCH_MODE: 'wall' } })
  const pool = runNode(path.join(WL, 'pool.js'), { env: { BENCH_SECONDS: seconds, BENCH_SAMPLER_INTERVAL: '1' } })
  const rt = require(path.join(ROOT, 'binding.js'))._benchSignalRoundTrip(ctx.quick ? 20000 : 100000).sort((a, b) => a - b)
  return {
    note: 'Handler entry to exit per signal, JS names on unless said; kernel share = an empty signal round trip to the calling thread.',
    cores,
    withinCores: pick(fit, Math.max(1, cores - 1)),
    withinCoresNoJsNames: pick(fitNoJs, Math.max(1, cores - 1)),
    oversubscribed: pick(over, cores * 2 + 1),
    oversubscribedWall: pick(overWall, cores * 2 + 1),
    pool: pick(pool, 4),
    kernelRoundTrip: { p50Ns: percentile(rt, 0.5), p99Ns: percentile(rt, 0.99), n: rt.length },
  }
}

function rows(r) {
  const copied = (x) => (x.copyBytesPerSample >= 0 ? `; ${(x.copyBytesPerSample / 1024).toFixed(1)} KiB of stack copied per sample` : '')
  const row = (what, x, target, ok) => [`handler time p50 / p99 (max): ${what}`, `${ns(x.p50Ns)} / ${ns(x.p99Ns)} (${ns(x.maxNs)})${copied(x)}`, target, ok]
  return [
    row(`${r.withinCores.busyThreads} busy JS threads, ${r.cores} cores`, r.withinCores, '≤ 1 µs / ≤ 10 µs', verdict(r.withinCores.p50Ns <= 1000 && r.withinCores.p99Ns <= 10000)),
    row('the same, jsNames: false', r.withinCoresNoJsNames, '', ''),
    row(`oversubscribed, ${r.oversubscribed.busyThreads} busy`, r.oversubscribed, '', ''),
    row('libuv pool', r.pool, '', ''),
    row(`oversubscribed, ${r.oversubscribedWall.busyThreads} busy, wall mode`, r.oversubscribedWall, '', ''),
    [`signal delivery p50 / p99 (max), wall mode, oversubscribed`, `${ns(r.oversubscribedWall.deliveryP50Ns)} / ${ns(r.oversubscribedWall.deliveryP99Ns)} (${ns(r.oversubscribedWall.deliveryMaxNs)})`, '', ''],
    ['kernel share: empty signal round trip p50 / p99', `${ns(r.kernelRoundTrip.p50Ns)} / ${ns(r.kernelRoundTrip.p99Ns)}`, '', ''],
  ]
}

module.exports = { name: 'handler', run, rows }
