'use strict'
// Shared by the benchmark workloads: optional in-process sampling (env
// BENCH_SAMPLER_INTERVAL, in ms), and a JSON result line on stdout.
const fs = require('fs')
const path = require('path')

const addonPath = path.join(__dirname, '..', '..')

// Loaded on the main thread before the workloads create their workers, and
// by each worker too, so that every isolate registers and its JavaScript
// frames are named (as with `machsampler record`, whose --require preload
// runs in workers as well).
const loaded = process.env.BENCH_SAMPLER_INTERVAL ? require(addonPath) : null

// @datadog/pprof's wall-time profiler (BENCH_DDPPROF_INTERVAL, in ms)
// profiles one isolate: it is started in every isolate, main and workers,
// so that it covers what the others cover.
const { isMainThread } = require('worker_threads')
const ddInterval = Number(process.env.BENCH_DDPPROF_INTERVAL || 0)
const dd = ddInterval ? require('@datadog/pprof').time : null
if (dd && !isMainThread) dd.start({ intervalMicros: ddInterval * 1000, durationMillis: 3600000 })

/** Called by a worker when its work is done: stops what profiles its isolate. */
function workerDone() {
  if (dd) dd.stop()
}

// The CPU-bound kernel of cpu.js and toggle.js: numeric work, allocation
// and string building, so the stacks cover JIT code, the GC and runtime
// builtins.
function kernel() {
  let acc = 0
  const arr = []
  for (let i = 0; i < 2000; i++) {
    acc += Math.sqrt(i * 1.5) * Math.sin(i)
    if (i % 50 === 0) arr.push({ i, s: 'v' + i })
  }
  return acc + JSON.stringify(arr).length
}

// CPU time of the whole process (every thread: workers, the pool, the
// sampler thread, V8's profiler thread) from the start of the measured
// window; less sensitive than throughput to other tenants of the machine.
let windowCpu = null

function maybeStartSampler() {
  windowCpu = process.cpuUsage()
  if (dd) dd.start({ intervalMicros: ddInterval * 1000, durationMillis: 3600000 })
  const interval = process.env.BENCH_SAMPLER_INTERVAL
  if (!interval) return null
  const ms = loaded
  ms.start({ intervalMs: Number(interval), jsNames: process.env.BENCH_JS_NAMES !== '0', mode: process.env.BENCH_MODE || 'cpu' })
  return ms
}

function finish(ms, result) {
  if (windowCpu) {
    const d = process.cpuUsage(windowCpu)
    result.cpuSec = (d.user + d.system) / 1e6
  }
  const all = process.cpuUsage()
  result.processCpuSec = (all.user + all.system) / 1e6
  if (dd) result.ddpprofStacks = dd.stop().sample.length
  if (ms) {
    // How much of V8's perf map (--perf-basic-prof, line-buffered) was
    // written while sampling: code placed after stop() cannot be in a sample.
    const perfMap = `/tmp/perf-${process.pid}.map`
    if (process.env.BENCH_PERF_MAP_MARK && fs.existsSync(perfMap)) fs.writeFileSync(process.env.BENCH_PERF_MAP_MARK, String(fs.statSync(perfMap).size))
    const t0 = process.hrtime.bigint()
    const p = ms.stop()
    result.stopMs = Number(process.hrtime.bigint() - t0) / 1e6
    result.stats = p.stats
    result.samples = p.stats.samplesCaptured
    result.rows = p.samples.thread.length
    if (process.env.BENCH_PROFILE_OUT) {
      const out = process.env.BENCH_PROFILE_OUT
      ms.saveProfile(p, out)
    }
  }
  process.stdout.write(JSON.stringify(result) + '\n')
}

module.exports = { maybeStartSampler, finish, workerDone, addonPath, kernel }
