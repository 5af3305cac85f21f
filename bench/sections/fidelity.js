'use strict'
// Fidelity against `perf record --call-graph dwarf` on the same process at
// the same time (workloads/unwind.js plus another addon's thread): per
// function shares of machsampler's samples against perf's, as an L1
// distance. On threads that run no JavaScript (libuv pool, V8 platform,
// the addon's thread) inclusive time is compared, since perf unwinds
// those with DWARF too; on JavaScript threads self time, since perf's
// DWARF unwinding stops in JIT code, which has no unwind info. The noise
// floor is the same L1 between two perf runs of the workload.
//
// perf's samples are kept only inside machsampler's first and last sample
// (perf attaches before start() and stays until exit, while only the
// addon's thread runs). perf's DWARF unwind gives up inside some
// functions (OpenSSL's SHA-512 assembly: its CFA is an expression), and
// those stacks stop there; inclusive time is therefore also compared on
// the samples whose leaf function perf unwinds to the thread's entry
// point at least 95 % of the time, a set chosen by leaf, so the same for
// both profilers.
const fs = require('fs')
const path = require('path')
const { spawn, spawnSync } = require('child_process')
const { ROOT, WL, nativeThreadsEnv } = require('../lib/proc')
const { l1, shares, median } = require('../lib/stats')
const { ROOTS, normalizeName, threadKind } = require('../lib/names')
const { pct, verdict } = require('../lib/table')

const JS_KINDS = new Set(['main', 'worker_thread'])

// glibc's internal aliases (__GI___qsort_r, __clone3) and the public
// names (qsort_r, clone3) are the same code; perf and machsampler pick
// different ones.
// Symbol versions (cfree@GLIBC_2.2.5) and the allocator's aliases of free
// and malloc, likewise.
const ALLOC = { cfree: 'free', libc_free: 'free', libc_malloc: 'malloc', libc_calloc: 'calloc', libc_realloc: 'realloc' }
const alias = (n) => {
  const bare = n.replace(/@.*$/, '').replace(/^__GI_/, '').replace(/^_+/, '')
  return ALLOC[bare] || bare
}
// Thunks: the two demanglers spell "non-virtual thunk to X" differently.
const thunk = (n) => n.replace(/^\{virtual override thunk\(\{offset\(-?\d+\)\}, (.*)\)\}$/, '$1').replace(/^non-virtual thunk to /, '')
const unnamed = (n) => (!n || /^0x[0-9a-f]+/i.test(n) || n === '[unknown]' ? '?' : alias(normalizeName(thunk(n))))

/** Adds one stack (leaf first) to the group's self and inclusive counts. */
function count(group, names, w) {
  const leaf = names[0]
  if (leaf === undefined) return
  group.samples += w
  group.stacks.push({ names, w })
  group.self.set(leaf, (group.self.get(leaf) || 0) + w)
  for (const n of new Set(names)) group.inclusive.set(n, (group.inclusive.get(n) || 0) + w)
}

const group = () => ({ samples: 0, self: new Map(), inclusive: new Map(), stacks: [] })
const groups = () => ({ js: group(), native: group() })

/** A stack is complete when its outermost frame is a thread's entry point. */
const complete = (names) => ROOTS.test(names[names.length - 1] || '')

/** Leaf functions whose stacks perf unwinds to the root ≥ 95 % of the time. */
function perfUnwindable(perfGroup) {
  const byLeaf = new Map()
  for (const { names, w } of perfGroup.stacks) {
    const c = byLeaf.get(names[0]) || { n: 0, complete: 0 }
    c.n += w
    if (complete(names)) c.complete += w
    byLeaf.set(names[0], c)
  }
  return new Set([...byLeaf].filter(([, c]) => c.complete >= 0.95 * c.n).map(([leaf]) => leaf))
}

/** Inclusive counts over the stacks whose leaf is in `leaves`, and their share of the group. */
function inclusiveFor(g, leaves) {
  const m = new Map()
  let kept = 0
  for (const { names, w } of g.stacks) {
    if (!leaves.has(names[0])) continue
    kept += w
    for (const n of new Set(names)) m.set(n, (m.get(n) || 0) + w)
  }
  return { counts: m, share: g.samples ? kept / g.samples : 0 }
}

const completeShare = (g) => g.stacks.reduce((a, { names, w }) => a + (complete(names) ? w : 0), 0) / Math.max(1, g.samples)

function ours(profPath) {
  const ms = require(ROOT)
  const p = ms.loadProfile(profPath)
  const s = ms.symbolicate(p)
  const name = (frame) => unnamed(s.functions.name[s.frameFunction[frame]])
  const stacks = new Map()
  const seen = new Map()
  let first = Infinity
  let last = -Infinity
  for (const t of p.samples.timeNs) {
    first = Math.min(first, Number(t))
    last = Math.max(last, Number(t))
  }
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
  return { groups: g, kindOf, window: [first, last] }
}

/**
 * perf script: a line with the tid, then the call chain leaf first; kernel
 * frames are left out (machsampler sees the user-space pc). --no-inline:
 * machsampler names one function per frame, as the symbol table does (and
 * perf's inline expansion runs addr2line per address: minutes per run).
 */
/**
 * Makes a perf map name each address by the code V8 put there last. V8
 * appends an entry whenever it places code, also where freed code was
 * (the interpreter trampolines of functions run once at start-up, later
 * covered by an optimized function), and perf keeps the first entry of an
 * address: an optimized loop is then named after a function that ran
 * once. An entry overlapped by a later one is dropped, and entries
 * written after sampling stopped (`bytes`: the map's size then) are
 * dropped too: a worker's code freed at its exit is often covered by code
 * compiled later.
 */
function latestWins(mapFile, bytes) {
  if (!fs.existsSync(mapFile)) return
  const text = fs.readFileSync(mapFile).subarray(0, bytes).toString('utf8')
  const lines = text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter(Boolean)
  const covered = [] // disjoint [start, end), sorted, from later entries
  const find = (x) => {
    let lo = 0
    let hi = covered.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (covered[mid][1] <= x) lo = mid + 1
      else hi = mid
    }
    return lo // first interval ending after x
  }
  const kept = []
  for (let i = lines.length - 1; i >= 0; i--) {
    const m = lines[i].match(/^([0-9a-f]+) ([0-9a-f]+) /i)
    if (!m) continue
    const start = parseInt(m[1], 16)
    const end = start + Math.max(1, parseInt(m[2], 16))
    const at = find(start)
    if (at < covered.length && covered[at][0] < end) continue
    covered.splice(at, 0, [start, end])
    kept.push(lines[i])
  }
  fs.writeFileSync(mapFile, kept.reverse().join('\n') + '\n')
}

function theirs(perfData, kindOf, [first, last]) {
  const t0 = Date.now()
  const r = spawnSync('perf', ['script', '--no-inline', '-i', perfData, '-F', 'tid,time,ip,sym,dso'], { encoding: 'utf8', maxBuffer: 1 << 30 })
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
    const head = line.match(/^\s*(\d+)\s+(\d+)\.(\d+):\s*$/)
    if (head) {
      flush()
      // Both clocks are CLOCK_MONOTONIC (perf record -k).
      const ns = Number(head[2]) * 1e9 + Number(head[3].padEnd(9, '0'))
      if (ns >= first && ns <= last) tid = Number(head[1])
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
  const mark = path.join(ctx.tmp, `fid${i}.mapsize`)
  const child = spawn(process.execPath, ['--perf-basic-prof-only-functions', '--interpreted-frames-native-stack', path.join(WL, 'unwind.js')], {
    env: { ...process.env, ...nativeThreadsEnv('sort'), BENCH_SECONDS: String(ctx.quick ? 3 : 10), BENCH_SAMPLER_INTERVAL: '1', BENCH_PID_FILE: pidFile, BENCH_START_DELAY: '700', BENCH_PROFILE_OUT: prof, BENCH_PERF_MAP_MARK: mark },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  return new Promise((resolve, reject) => {
    let perf = null
    let perfDone = null
    const waitPid = () => {
      if (!fs.existsSync(pidFile)) return setTimeout(waitPid, 20)
      const pid = fs.readFileSync(pidFile, 'utf8').trim()
      perf = spawn('perf', ['record', '-F', '999', '-k', 'CLOCK_MONOTONIC', '--call-graph', 'dwarf', '-q', '-o', perfData, '-p', pid], { stdio: 'ignore' })
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
        latestWins(`/tmp/perf-${child.pid}.map`, Number(fs.readFileSync(mark, 'utf8')))
        const o = ours(prof)
        const t = theirs(perfData, o.kindOf, o.window)
        ctx.log(`fidelity run ${i}: perf script ${theirs.scriptMs} ms, ${(fs.statSync(perfData).size / 2 ** 20).toFixed(0)} MiB`)
        resolve({ ours: o.groups, perf: t })
      } catch (e) {
        reject(e)
      }
    })
  })
}

/**
 * The noise floor a profile of `n` stacks can reach: L1 between perf run
 * `b` and perf run `a` drawn down to `n` of its stacks (fixed-seed draws
 * without replacement, median of `draws`). machsampler's CPU mode takes
 * fewer, heavier stacks than perf (the kernel checks CPU timers at its
 * tick), so at equal CPU time its shares carry more sampling noise than
 * two perf runs do.
 */
function noiseAtCount(n, a, b, what, draws = 7) {
  let seed = 0x9e3779b9
  const random = () => {
    seed = (seed + 0x6d2b79f5) >>> 0
    let t = seed
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32
  }
  if (n >= a.stacks.length) return l1(shares(a[what]), shares(b[what]))
  const out = []
  for (let d = 0; d < draws; d++) {
    const pool = [...a.stacks]
    const g = group()
    for (let i = 0; i < n; i++) {
      const j = i + Math.floor(random() * (pool.length - i))
      ;[pool[i], pool[j]] = [pool[j], pool[i]]
      count(g, pool[i].names, pool[i].w)
    }
    out.push(l1(shares(g[what]), shares(b[what])))
  }
  return median(out)
}

async function run(ctx) {
  if (ctx.perfOk !== true) return { skipped: `perf record does not work here: ${ctx.perfOk}` }
  const runs = [await once(ctx, 0), await once(ctx, 1)]
  const measure = { js: 'self', native: 'inclusive' }
  const out = { note: 'L1 distance of per-function shares, machsampler (1 kHz, CPU mode) against perf record -F 999 --call-graph dwarf on the same process; JS threads (main, worker): self time; other threads: inclusive time (each function counted once per sample, as shares of all such counts); noise = two perf runs of the workload against each other.' }
  for (const [group, what] of Object.entries(measure)) {
    const d = runs.map((r) => l1(shares(r.ours[group][what]), shares(r.perf[group][what])))
    const noise = l1(shares(runs[0].perf[group][what]), shares(runs[1].perf[group][what]))
    const stacks = median(runs.map((r) => r.ours[group].stacks.length))
    const noiseAtOurStacks = noiseAtCount(stacks, runs[1].perf[group], runs[0].perf[group], what)
    const a = shares(runs[0].ours[group][what])
    const b = shares(runs[0].perf[group][what])
    const diffs = [...new Set([...a.keys(), ...b.keys()])].map((k) => [k, +((a.get(k) || 0) - (b.get(k) || 0)).toFixed(4)]).sort((x, y) => Math.abs(y[1]) - Math.abs(x[1])).slice(0, 8)
    const top = (m) => [...shares(m)].sort((x, y) => y[1] - x[1]).slice(0, 8).map(([k, v]) => [k, +v.toFixed(4)])
    const extra = {}
    if (what === 'inclusive') {
      // The same comparison on the leaves perf unwinds (chosen per run
      // from that run's perf stacks); noise: perf run 1 on run 0's leaves.
      const sub = runs.map((r) => {
        const leaves = perfUnwindable(r.perf[group])
        const o = inclusiveFor(r.ours[group], leaves)
        const t = inclusiveFor(r.perf[group], leaves)
        return { l1: l1(shares(o.counts), shares(t.counts)), oursShare: o.share, perfShare: t.share }
      })
      const leaves0 = perfUnwindable(runs[0].perf[group])
      extra.perfUnwindable = {
        l1: median(sub.map((x) => x.l1)),
        l1Runs: sub.map((x) => x.l1),
        noiseL1: l1(shares(inclusiveFor(runs[0].perf[group], leaves0).counts), shares(inclusiveFor(runs[1].perf[group], leaves0).counts)),
        samplesKept: { machsampler: median(sub.map((x) => x.oursShare)), perf: median(sub.map((x) => x.perfShare)) },
      }
      extra.complete = { machsampler: median(runs.map((r) => completeShare(r.ours[group]))), perf: median(runs.map((r) => completeShare(r.perf[group]))) }
    }
    out[group] = { what, l1: median(d), l1Runs: d, noiseL1: noise, noiseL1AtOurStacks: noiseAtOurStacks, stacks: { machsampler: runs.map((r) => r.ours[group].stacks.length), perf: runs.map((r) => r.perf[group].stacks.length) }, ...extra, top: { machsampler: top(runs[0].ours[group][what]), perf: top(runs[0].perf[group][what]), perf2: top(runs[1].perf[group][what]) }, samples: { machsampler: runs.map((r) => r.ours[group].samples), perf: runs.map((r) => r.perf[group].samples) }, largestDifferences: diffs }
    ctx.log(`fidelity ${group} (${what}): L1 ${d.map((x) => x.toFixed(3)).join(', ')}; noise ${noise.toFixed(3)}, at machsampler's ${stacks} stacks ${noiseAtOurStacks.toFixed(3)}; ${JSON.stringify(diffs.slice(0, 4))}`)
    if (extra.perfUnwindable) ctx.log(`fidelity ${group} on leaves perf unwinds: ${JSON.stringify(extra)}`)
  }
  return out
}

function rows(r) {
  if (r.skipped) return [['fidelity vs perf --call-graph dwarf', `skipped: ${r.skipped}`, '≤ 0.10', '']]
  const label = { js: 'JS threads (main, worker), self time', native: 'pool, V8 platform and addon threads, inclusive time' }
  const range = (xs) => `[${Math.min(...xs).toFixed(3)}..${Math.max(...xs).toFixed(3)}]`
  const out = []
  for (const g of Object.keys(label)) {
    const x = r[g]
    const complete = x.complete ? `; complete stacks: machsampler ${pct(x.complete.machsampler * 100, 1)}, perf ${pct(x.complete.perf * 100, 1)}` : ''
    out.push([`fidelity vs perf --call-graph dwarf, L1: ${label[g]}`, `${x.l1.toFixed(3)} ${range(x.l1Runs)} (noise floor ${x.noiseL1.toFixed(3)}, ${x.noiseL1AtOurStacks == null ? '-' : x.noiseL1AtOurStacks.toFixed(3)} at machsampler's stack count; ${x.samples.machsampler.join('/')} vs ${x.samples.perf.join('/')} samples${x.stacks ? ` in ${x.stacks.machsampler.join('/')} vs ${x.stacks.perf.join('/')} stacks` : ''}${complete})`, '≤ 0.10', verdict(x.l1 <= 0.1)])
    const u = x.perfUnwindable
    if (u) out.push([`  the same, on samples whose leaf perf unwinds to the root ≥ 95 % of the time`, `${u.l1.toFixed(3)} ${range(u.l1Runs)} (noise floor ${u.noiseL1.toFixed(3)}; ${pct(u.samplesKept.machsampler * 100, 1)} / ${pct(u.samplesKept.perf * 100, 1)} of samples)`, '≤ 0.10', verdict(u.l1 <= 0.1)])
  }
  return out
}

module.exports = { name: 'fidelity', run, rows }
