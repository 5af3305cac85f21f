'use strict'
// Shared by the benchmark workloads: optional in-process sampling (env
// BENCH_SAMPLER_INTERVAL, in ms), and a JSON result line on stdout.
const path = require('path')

const addonPath = path.join(__dirname, '..', '..')

// Loaded before the workloads create their workers, so that the workers
// load it too and their JavaScript frames are named (as in an app that
// requires machsampler first).
const loaded = process.env.BENCH_SAMPLER_INTERVAL ? require(addonPath) : null

function maybeStartSampler() {
  const interval = process.env.BENCH_SAMPLER_INTERVAL
  if (!interval) return null
  const ms = loaded
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
