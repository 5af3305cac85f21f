'use strict'
// Reproducer: idle samples crowd out busy ones.
//
// With 2,000 idle native threads at 1 ms, the 1 M-sample buffer filled in
// 0.7 s and the busy main thread got 504 of about 5,000 samples, 5.4 M
// dropped. Now, in CPU mode (the default) an idle thread is never sampled,
// and in wall mode its samples with an unchanged stack share one row.
//
//   node stress/repro/idle-crowding.js   exit 1 if reproduced

const { verdict, addonScript, withNativeThreads } = require('./lib')

const PROGRAM = (mode) =>
  addonScript(`const fs = require('fs')
const cpu = () => Number(fs.readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ')[0])
ms.start({ intervalMs: 1, mode: '${mode}' })
const c0 = cpu(); const end = Date.now() + 3000; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)
const used = cpu() - c0
const p = ms.stop()
const main = p.threads.findIndex((t) => t.isMain)
let mainSamples = 0, rows = 0, idleWeight = 0
for (let i = 0; i < p.samples.thread.length; i++) {
  rows++
  if (p.samples.thread[i] === main && !p.samples.idle[i]) mainSamples += p.samples.weight[i]
  if (p.samples.idle[i]) idleWeight += p.samples.weight[i]
}
console.log(JSON.stringify({ threads: p.threads.length, rows, mainSamples, mainExpected: Math.round(used / 1e6), idleWeight, dropped: p.stats.samplesDropped }))`)

const problems = []
const seen = []
for (const mode of ['cpu', 'wall']) {
  const r = withNativeThreads('idle=2000', process.execPath, ['-e', PROGRAM(mode)], { timeout: 120000 })
  let o
  try {
    o = JSON.parse(r.stdout)
  } catch {
    problems.push(`${mode}: no result (status ${r.status} signal ${r.signal}): ${r.stderr.slice(-300)}`)
    continue
  }
  seen.push(`${mode}: ${o.threads} threads, ${o.rows} rows, main ${o.mainSamples} of ~${o.mainExpected}, ${o.dropped} dropped`)
  if (o.threads < 2000) problems.push(`${mode}: only ${o.threads} threads seen`)
  if (o.dropped > 0) problems.push(`${mode}: ${o.dropped} samples dropped`)
  // The busy main thread gets its share: within 15 % of its CPU time.
  if (mode === 'cpu' && Math.abs(o.mainSamples - o.mainExpected) > o.mainExpected * 0.15) problems.push(`cpu: main thread got ${o.mainSamples} samples for ~${o.mainExpected} ms of CPU`)
  // Wall mode: the sampler walks 2,000 threads a tick, and on a loaded
  // 2-core machine (CI runs suites side by side) gets about half its ticks
  // (1,465 of ~2,945 seen once); crowding gave the main thread a tenth.
  if (mode === 'wall' && o.mainSamples < 0.3 * o.mainExpected) problems.push(`wall: main thread got ${o.mainSamples} samples for ~${o.mainExpected} ms of CPU`)
}
verdict(problems.length > 0, problems.length ? problems.join('; ') : seen.join('; '))
