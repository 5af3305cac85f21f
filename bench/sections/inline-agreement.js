'use strict'
// JS self time against V8's own profiler on a server workload where V8
// inlines: L1 distance of the main thread's JS self-time shares,
// machsampler against each of two --cpu-prof runs, and the two --cpu-prof
// runs against each other (the noise), over interleaved rounds.
//
// Both sides count a sample for the innermost JavaScript function on its
// stack, as V8 does: a sample in native code called from JS (a binding
// such as `writev`, JSON.stringify's C++, a regular expression) counts for
// its JS caller; samples with no JS on the stack ((idle), (program),
// (garbage collector)) count for none. --cpu-prof samples wall-clock time,
// so the row with the target compares machsampler in wall mode; CPU mode,
// machsampler's default, leaves out time the thread waited to run, and is
// shown beside it. machsampler runs with V8's code log (the flags
// `machsampler record` adds), which says what optimized code inlined, and,
// to show what that changes, without it (inlined functions then count as
// the function they were inlined into).
//
// The server and its load generator run on cores of their own where the
// machine has two (see the workload: when they share the cores,
// `--cpu-prof`'s split between the route and `writev` moves with its own
// load, which is not what this row is about); the unpinned comparison is
// shown beside it.
const fs = require('fs')
const path = require('path')
const { spawnSync } = require('child_process')
const { WL, runJson, tool } = require('../lib/proc')
const env = require('../../lib/env.js')
const { median, spread, l1, shares } = require('../lib/stats')
const { verdict } = require('../lib/table')

/** [server CPU, client CPU]: two CPUs this process may run on, if `taskset` can pin to them; else null. */
function cpusToPin() {
  if (process.platform !== 'linux' || tool('taskset', ['-V']) === null) return null
  const status = fs.readFileSync('/proc/self/status', 'utf8').match(/^Cpus_allowed_list:\s*(\S+)/m)
  if (!status) return null
  const cpus = status[1].split(',').flatMap((r) => {
    const [a, b = a] = r.split('-').map(Number)
    return Array.from({ length: b - a + 1 }, (_, i) => a + i)
  })
  return cpus.length >= 2 ? [cpus[0], cpus[1]] : null
}

/** The main thread's JS self-time shares from a --cpu-prof run, from 800 ms on (machsampler's window). */
function cpuprof(ctx, script, arg) {
  const dir = fs.mkdtempSync(path.join(ctx.tmp, 'cpuprof-'))
  try {
    const r = spawnSync(process.execPath, ['--cpu-prof', '--cpu-prof-interval', '1000', '--cpu-prof-dir', dir, script, JSON.stringify(arg)], { encoding: 'utf8', timeout: 120000 })
    if (r.status !== 0) throw new Error(`inline-server --cpu-prof failed: ${r.stderr}`)
    const prof = JSON.parse(fs.readFileSync(path.join(dir, fs.readdirSync(dir).find((f) => f.endsWith('.cpuprofile')))))
    return jsSelfTime(prof, 800000)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** Counts per function of a .cpuprofile's samples from `fromUs` on, each for the nearest node with a script. */
function jsSelfTime(prof, fromUs) {
  const byId = new Map(prof.nodes.map((n) => [n.id, n]))
  const parent = new Map()
  for (const n of prof.nodes) for (const c of n.children || []) parent.set(c, n)
  const counts = new Map()
  let t = prof.startTime
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i]
    if (t - prof.startTime < fromUs) continue
    let n = byId.get(prof.samples[i])
    while (n && !n.callFrame.url) n = parent.get(n.id)
    if (!n) continue
    const name = n.callFrame.functionName || '(anonymous)'
    counts.set(name, (counts.get(name) || 0) + 1)
  }
  return counts
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

const asMap = (o) => new Map(Object.entries(o))

/** Mean L1 distance of `x` to each of `refs`. */
const l1To = (x, refs) => refs.reduce((d, r) => d + l1(x, r), 0) / refs.length

/** The largest share differences between `x` and the mean of `refs`, for the JSON. */
function largestDifferences(x, refs, n = 6) {
  const names = new Set([...x.keys(), ...refs.flatMap((r) => [...r.keys()])])
  const rows = [...names].map((k) => {
    const ref = refs.reduce((s, r) => s + (r.get(k) || 0), 0) / refs.length
    return { function: k, machsampler: +(x.get(k) || 0).toFixed(4), cpuProf: +ref.toFixed(4) }
  })
  return rows.sort((a, b) => Math.abs(b.machsampler - b.cpuProf) - Math.abs(a.machsampler - a.cpuProf)).slice(0, n)
}

function run(ctx) {
  const script = path.join(WL, 'inline-server.js')
  const rounds = ctx.quick ? 2 : 9
  const pin = cpusToPin()
  const d = { noise: [], wall: [], cpu: [], wallNoLog: [], oursNoise: [] }
  if (pin) d.unpinned = []
  let last = null
  for (let i = 0; i < rounds; i++) {
    // Alternate which profiler runs first in a round.
    const runs = {}
    const order = ['a', 'wall', 'b', 'cpu', 'wall2', 'wallNoLog', ...(pin ? ['unpinnedA', 'unpinnedWall'] : [])]
    for (const what of i % 2 ? order.reverse() : order) {
      const arg = { pin: what.startsWith('unpinned') ? null : pin }
      if (what === 'a' || what === 'b' || what === 'unpinnedA') runs[what] = shares(cpuprof(ctx, script, arg))
      else if (what === 'wallNoLog') runs[what] = asMap(runJson(script, { ...arg, sample: true, mode: 'wall' }))
      else runs[what] = asMap(withV8Log(ctx, script, { ...arg, sample: true, mode: what === 'cpu' ? 'cpu' : 'wall' }))
    }
    const refs = [runs.a, runs.b]
    d.noise.push(l1(runs.a, runs.b))
    d.wall.push(l1To(runs.wall, refs))
    d.cpu.push(l1To(runs.cpu, refs))
    d.wallNoLog.push(l1To(runs.wallNoLog, refs))
    d.oursNoise.push(l1(runs.wall, runs.wall2))
    if (pin) d.unpinned.push(l1(runs.unpinnedWall, runs.unpinnedA))
    last = { refs, wall: runs.wall, unpinned: pin ? { machsampler: runs.unpinnedWall, cpuProf: runs.unpinnedA } : null }
  }
  const out = {
    note: 'L1 distance of main-thread JS self-time shares (innermost JS function; native callees count for their JS caller on both sides) on a loopback HTTP server with inlining, medians over interleaved rounds; noise = two --cpu-prof runs; machsampler in wall mode, as --cpu-prof samples, unless said; server and client each on a core of its own (pinned), unless said.',
    rounds,
    pinned: pin,
    l1Unpinned: pin ? median(d.unpinned) : null,
    largestDifferencesUnpinned: last.unpinned ? largestDifferences(last.unpinned.machsampler, [last.unpinned.cpuProf]) : null,
    noiseL1: median(d.noise),
    l1: median(d.wall),
    l1CpuMode: median(d.cpu),
    l1WithoutV8Log: median(d.wallNoLog),
    machsamplerNoiseL1: median(d.oursNoise),
    runs: d,
    spread: Object.fromEntries(Object.entries(d).map(([k, v]) => [k, spread(v)])),
    largestDifferences: largestDifferences(last.wall, last.refs),
  }
  ctx.log(`inlineAgreement ${JSON.stringify({ ...out, runs: undefined })}`)
  return out
}

function rows(a) {
  const r = (x, k) => `${x.toFixed(2)} [${a.spread[k].min.toFixed(2)}..${a.spread[k].max.toFixed(2)}]`
  const where = a.pinned ? `server and client on CPUs ${a.pinned[0]} and ${a.pinned[1]}` : 'unpinned: fewer than 2 CPUs or no taskset'
  const rows = [
    [
      `JS self time vs --cpu-prof, server with inlining, wall mode (L1, ${a.rounds} rounds; ${where})`,
      `${r(a.l1, 'wall')}; noise: two --cpu-prof runs ${r(a.noiseL1, 'noise')}, two of ours ${r(a.machsamplerNoiseL1, 'oursNoise')}`,
      '≤ noise',
      verdict(a.l1 <= a.noiseL1),
    ],
    ['  the same in CPU mode; in wall mode without V8\'s log (inlined functions not split out)', `${r(a.l1CpuMode, 'cpu')}; ${r(a.l1WithoutV8Log, 'wallNoLog')}`, '', ''],
  ]
  if (a.pinned && a.l1Unpinned !== null && a.l1Unpinned !== undefined) {
    const top = (a.largestDifferencesUnpinned || []).slice(0, 2).map((x) => `${x.function} ${(100 * x.machsampler).toFixed(0)} vs ${(100 * x.cpuProf).toFixed(0)} %`).join(', ')
    rows.push(['  the same unpinned (client and server share the cores; one --cpu-prof run)', `${r(a.l1Unpinned, 'unpinned')}${top ? `; ${top}` : ''}`, '', ''])
  }
  return rows
}

module.exports = { name: 'inlineAgreement', run, rows }
