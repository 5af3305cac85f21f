'use strict'
// JS self time against V8's own profiler on a server workload where V8
// inlines: L1 distance of the main thread's JS self-time shares,
// machsampler against each of two --cpu-prof runs, and the two --cpu-prof
// runs against each other (the noise). machsampler runs with V8's code log
// (the flags `machsampler record` adds), which says what optimized code
// inlined, and without it (inlined functions then count as the function
// they were inlined into).
const fs = require('fs')
const path = require('path')
const { spawnSync } = require('child_process')
const { WL, runJson } = require('../lib/proc')
const env = require('../../lib/env.js')
const { median, spread } = require('../lib/stats')
const { verdict } = require('../lib/table')

function cpuprof(ctx, script) {
  const dir = fs.mkdtempSync(path.join(ctx.tmp, 'cpuprof-'))
  const r = spawnSync(process.execPath, ['--cpu-prof', '--cpu-prof-interval', '1000', '--cpu-prof-dir', dir, script, '{}'], { encoding: 'utf8', timeout: 120000 })
  if (r.status !== 0) throw new Error(`inline-server --cpu-prof failed: ${r.stderr}`)
  const prof = JSON.parse(fs.readFileSync(path.join(dir, fs.readdirSync(dir).find((f) => f.endsWith('.cpuprofile')))))
  const byId = new Map(prof.nodes.map((n) => [n.id, n]))
  const counts = new Map()
  let total = 0
  let t = prof.startTime
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i]
    if (t - prof.startTime < 800000) continue // the same window as machsampler's
    const n = byId.get(prof.samples[i])
    if (!n.callFrame.url) continue
    const name = n.callFrame.functionName || '(anonymous)'
    counts.set(name, (counts.get(name) || 0) + 1)
    total++
  }
  return Object.fromEntries([...counts].map(([k, v]) => [k, v / total]))
}

/** In-process machsampler with V8's code log, as `machsampler record` runs node. */
function withV8Log(ctx, script, arg) {
  const dir = fs.mkdtempSync(path.join(ctx.tmp, 'v8log-'))
  const logfile = path.join(dir, 'v8.log')
  const flags = env.v8LogFlags(process.execPath, logfile)
  try {
    return runJson(script, arg, { nodeArgs: flags, env: { MACHSAMPLER_V8_LOG: logfile } })
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

const l1 = (a, b) => [...new Set([...Object.keys(a), ...Object.keys(b)])].reduce((d, k) => d + Math.abs((a[k] || 0) - (b[k] || 0)), 0)

function run(ctx) {
  const script = path.join(WL, 'inline-server.js')
  const noise = []
  const all = []
  const jsLeaf = []
  const noLog = []
  for (let i = 0; i < Math.min(ctx.cfg.rounds, 3); i++) {
    const a = cpuprof(ctx, script)
    const b = cpuprof(ctx, script)
    const ours = withV8Log(ctx, script, { sample: true })
    const oursJs = withV8Log(ctx, script, { sample: true, jsLeaf: true })
    const oursNoLog = runJson(script, { sample: true, jsLeaf: true })
    noise.push(l1(a, b))
    all.push((l1(ours, a) + l1(ours, b)) / 2)
    jsLeaf.push((l1(oursJs, a) + l1(oursJs, b)) / 2)
    noLog.push((l1(oursNoLog, a) + l1(oursNoLog, b)) / 2)
  }
  const out = {
    note: 'L1 distance of main-thread JS self-time shares on a loopback HTTP server with inlining; noise = two --cpu-prof runs.',
    noiseL1: median(noise),
    l1: median(all),
    l1JsLeafOnly: median(jsLeaf),
    l1JsLeafOnlyWithoutV8Log: median(noLog),
    spread: { noise: spread(noise), l1: spread(all), l1JsLeafOnly: spread(jsLeaf), l1JsLeafOnlyWithoutV8Log: spread(noLog) },
  }
  ctx.log(`inlineAgreement ${JSON.stringify(out)}`)
  return out
}

function rows(a) {
  return [['JS self time vs --cpu-prof, server with inlining (L1)', `${a.l1.toFixed(2)}; JS leaves only ${a.l1JsLeafOnly.toFixed(2)}, without V8's log ${a.l1JsLeafOnlyWithoutV8Log.toFixed(2)} (noise: two --cpu-prof runs ${a.noiseL1.toFixed(2)})`, '≤ noise', verdict(a.l1JsLeafOnly <= a.noiseL1)]]
}

module.exports = { name: 'inlineAgreement', run, rows }
