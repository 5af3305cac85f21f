'use strict'
// Shared by the benchmark workloads: optional in-process sampling (env
// BENCH_SAMPLER_INTERVAL, in ms), and a JSON result line on stdout.
const path = require('path')

const addonPath = path.join(__dirname, '..', '..')

function maybeStartSampler() {
  const interval = process.env.BENCH_SAMPLER_INTERVAL
  if (!interval) return null
  const ms = require(addonPath)
  ms.start({ intervalMs: Number(interval), jsNames: process.env.BENCH_JS_NAMES !== '0' })
  return ms
}

function finish(ms, result) {
  if (ms) {
    const t0 = process.hrtime.bigint()
    const p = ms.stop()
    result.stopMs = Number(process.hrtime.bigint() - t0) / 1e6
    result.stats = p.stats
    result.samples = p.samples.thread.length
    if (process.env.BENCH_PROFILE_OUT) {
      const out = process.env.BENCH_PROFILE_OUT
      ms.saveProfile(p, out)
    }
  }
  process.stdout.write(JSON.stringify(result) + '\n')
}

module.exports = { maybeStartSampler, finish, addonPath }
