'use strict'
// Fidelity against `perf record --call-graph dwarf` on the same process at
// the same time (workloads/unwind.js plus another addon's thread): per
// function shares of machsampler's samples against perf's, as an L1
// distance. On threads that run no JavaScript (libuv pool, V8 platform,
// the addon's thread) inclusive time is compared, since perf unwinds
// those with DWARF too; on JavaScript threads self time, since perf's
// DWARF unwinding stops in JIT code, which has no unwind info. The noise
// floor is the same L1 between two perf runs of the workload.
const fs = require('fs')
const path = require('path')
const { spawn, spawnSync } = require('child_process')
const { ROOT, WL, nativeThreadsEnv } = require('../lib/proc')
const { l1, shares, median } = require('../lib/stats')
const { normalizeName, threadKind } = require('../lib/names')
const { verdict } = require('../lib/table')

const JS_KINDS = new Set(['main', 'worker_thread'])

// glibc's internal aliases (__GI___qsort_r, __clone3) and the public
// names (qsort_r, clone3) are the same code; perf and machsampler pick
// different ones.
const alias = (n) => n.replace(/^__GI_/, '').replace(/^_+/, '')
// Thunks: the two demanglers spell "non-virtual thunk to X" differently.
const thunk = (n) => n.replace(/^\{virtual override thunk\(\{offset\(-?\d+\)\}, (.*)\)\}$/, '$1').replace(/^non-virtual thunk to /, '')
const unnamed = (n) => (!n || /^0x[0-9a-f]+/i.test(n) || n === '[unknown]' ? '?' : alias(normalizeName(thunk(n))))

/** Adds one stack (leaf first) to the group's self and inclusive counts. */
function count(group, names, w) {
  const leaf = names[0]
  if (leaf === undefined) return
  group.samples += w
  group.self.set(leaf, (group.self.get(leaf) || 0) + w)
  for (const n of new Set(names)) group.inclusive.set(n, (group.inclusive.get(n) || 0) + w)
}

const groups = () => ({ js: { samples: 0, self: new Map(), inclusive: new Map() }, native: { samples: 0, self: new Map(), inclusive: new Map() } })

function ours(profPath) {
  const ms = require(ROOT)
  const p = ms.loadProfile(profPath)
  const s = ms.symbolicate(p)
  const name = (frame) => unnamed(s.functions.name[s.frameFunction[frame]])
  const stacks = new Map()
  const seen = new Map()
  for (let i = 0; i < p.samples.thread.length; i++) {
    const t = p.samples.thread[i]
    const names = []
    for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) names.push(name(p.stacks.frame[n]))
    if (!seen.has(t)) seen.set(t, new Set())
    for (const x of names) if (seen.get(t).size < 4000) seen.get(t).add(x)
    if (!p.samples.idle[i]) stacks.set(i, { t, names, w: p.samples.weight[i] })
  }
  const kindOf = new Map()
  for (const [t, names] of seen) kindOf.set(p.threads[t].tid, threadKind(p.threads[t], [...names]))
  const g = groups()
  for (const { t, names, w } of stacks.values()) count(g[JS_KINDS.has(kindOf.get(p.threads[t].tid)) ? 'js' : 'native'], names, w)
  return { groups: g, kindOf }
}

/**
 * perf script: a line with the tid, then the call chain leaf first; kernel
 * frames are left out (machsampler sees the user-space pc). --no-inline:
 * machsampler names one function per frame, as the symbol table does (and
 * perf's inline expansion runs addr2line per address: minutes per run).
 */
function theirs(perfData, kindOf) {
  const t0 = Date.now()
  const r = spawnSync('perf', ['script', '--no-inline', '-i', perfData, '-F', 'tid,ip,sym,dso'], { encoding: 'utf8', maxBuffer: 1 << 30 })
  if (r.status !== 0) throw new Error(`perf script failed: ${r.stderr}`)
  theirs.scriptMs = Date.now() - t0
  const g = groups()
  let tid = null
  let names = []
  const flush = () => {
    if (tid !== null && kindOf.has(tid)) count(g[JS_KINDS.has(kindOf.get(tid)) ? 'js' : 'native'], names, 1)
    tid = null
    names = []
  }
  for (const line of r.stdout.split('\n')) {
    const head = line.match(/^\s*(\d+)\s*$/)
    if (head) {
      flush()
      tid = Number(head[1])
      continue
    }
    if (!line.trim()) {
      flush()
      continue
    }
    const f = line.trim().match(/^([0-9a-f]+)\s+(.*?)\s+\(([^)]*)\)$/)
    if (!f || f[3].includes('kernel.kallsyms') || (f[3] === '[unknown]' && f[1].startsWith('ffff'))) continue
    names.push(unnamed(f[2].replace(/\+0x[0-9a-f]+$/, '')))
  }
  flush()
  return g
}

function once(ctx, i) {
  const pidFile = path.join(ctx.tmp, `fid${i}.pid`)
  const prof = path.join(ctx.tmp, `fid${i}.machprof`)
  const perfData = path.join(ctx.tmp, `fid${i}.perf.data`)
  const child = spawn(process.execPath, ['--perf-basic-prof-only-functions', '--interpreted-frames-native-stack', path.join(WL, 'unwind.js')], {
    env: { ...process.env, ...nativeThreadsEnv('sort'), BENCH_SECONDS: String(ctx.quick ? 3 : 10), BENCH_SAMPLER_INTERVAL: '1', BENCH_PID_FILE: pidFile, BENCH_START_DELAY: '700', BENCH_PROFILE_OUT: prof },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  return new Promise((resolve, reject) => {
    let perf = null
    let perfDone = null
    const waitPid = () => {
      if (!fs.existsSync(pidFile)) return setTimeout(waitPid, 20)
      const pid = fs.readFileSync(pidFile, 'utf8').trim()
      perf = spawn('perf', ['record', '-F', '999', '--call-graph', 'dwarf', '-q', '-o', perfData, '-p', pid], { stdio: 'ignore' })
      perfDone = new Promise((r) => perf.once('exit', r))
    }
    waitPid()
    child.once('exit', async (code) => {
      if (perf) {
        perf.kill('SIGINT')
        await perfDone
      }
      if (code !== 0) return reject(new Error(`unwind.js under perf exited ${code}`))
      try {
        const o = ours(prof)
        const t = theirs(perfData, o.kindOf)
        ctx.log(`fidelity run ${i}: perf script ${theirs.scriptMs} ms, ${(fs.statSync(perfData).size / 2 ** 20).toFixed(0)} MiB`)
        resolve({ ours: o.groups, perf: t })
      } catch (e) {
        reject(e)
      }
    })
  })
}

async function run(ctx) {
  if (ctx.perfOk !== true) return { skipped: `perf record does not work here: ${ctx.perfOk}` }
  const runs = [await once(ctx, 0), await once(ctx, 1)]
  const measure = { js: 'self', native: 'inclusive' }
  const out = { note: 'L1 distance of per-function shares, machsampler (1 kHz, CPU mode) against perf record -F 999 --call-graph dwarf on the same process; JS threads (main, worker): self time; other threads: inclusive time (each function counted once per sample, as shares of all such counts); noise = two perf runs of the workload against each other.' }
  for (const [group, what] of Object.entries(measure)) {
    const d = runs.map((r) => l1(shares(r.ours[group][what]), shares(r.perf[group][what])))
    const noise = l1(shares(runs[0].perf[group][what]), shares(runs[1].perf[group][what]))
    const a = shares(runs[0].ours[group][what])
    const b = shares(runs[0].perf[group][what])
    const diffs = [...new Set([...a.keys(), ...b.keys()])].map((k) => [k, +((a.get(k) || 0) - (b.get(k) || 0)).toFixed(4)]).sort((x, y) => Math.abs(y[1]) - Math.abs(x[1])).slice(0, 8)
    const top = (m) => [...shares(m)].sort((x, y) => y[1] - x[1]).slice(0, 8).map(([k, v]) => [k, +v.toFixed(4)])
    out[group] = { what, l1: median(d), l1Runs: d, noiseL1: noise, top: { machsampler: top(runs[0].ours[group][what]), perf: top(runs[0].perf[group][what]), perf2: top(runs[1].perf[group][what]) }, samples: { machsampler: runs.map((r) => r.ours[group].samples), perf: runs.map((r) => r.perf[group].samples) }, largestDifferences: diffs }
    ctx.log(`fidelity ${group} (${what}): L1 ${d.map((x) => x.toFixed(3)).join(', ')}; noise ${noise.toFixed(3)}; ${JSON.stringify(diffs.slice(0, 4))}`)
  }
  return out
}

function rows(r) {
  if (r.skipped) return [['fidelity vs perf --call-graph dwarf', `skipped: ${r.skipped}`, '≤ 0.10', '']]
  const label = { js: 'JS threads (main, worker), self time', native: 'pool, V8 platform and addon threads, inclusive time' }
  return Object.keys(label).map((g) => {
    const x = r[g]
    return [`fidelity vs perf --call-graph dwarf, L1: ${label[g]}`, `${x.l1.toFixed(3)} [${Math.min(...x.l1Runs).toFixed(3)}..${Math.max(...x.l1Runs).toFixed(3)}] (noise floor ${x.noiseL1.toFixed(3)}; ${x.samples.machsampler.join('/')} vs ${x.samples.perf.join('/')} samples)`, '≤ 0.10', verdict(x.l1 <= 0.1)]
  })
}

module.exports = { name: 'fidelity', run, rows }
