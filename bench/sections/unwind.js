'use strict'
// Complete stacks: the share of running (non-idle) samples whose outermost
// frame is the thread's entry point, overall and per thread, on a workload
// with every kind of thread busy (workloads/unwind.js, plus another
// addon's thread from native-threads.c), sampled every 2 ms, on Node 20
// and 22. Why stacks ended short comes from the sampler's own counters.
const path = require('path')
const { ROOT, WL, runNode, tool, nodeOfMajor, nativeThreadsEnv } = require('../lib/proc')
const { ROOTS, threadKind } = require('../lib/names')
const { pct, verdict } = require('../lib/table')

const MIN_SAMPLES = 40
const REASONS = ['stacksReachingRoot', 'endedTruncatedCopy', 'endedNoUnwindInfo', 'endedBadCfa', 'endedNotExecutable', 'endedCopyFailed', 'truncatedStacks', 'foreignStacks']

/** Per thread: running samples, complete ones, and where incomplete ones ended. */
function completeness(ms, file) {
  const p = ms.loadProfile(file)
  const s = ms.symbolicate(p)
  const name = (frame) => s.functions.name[s.frameFunction[frame]] || '?'
  const per = new Map()
  for (let i = 0; i < p.samples.thread.length; i++) {
    const t = p.samples.thread[i]
    let e = per.get(t)
    if (!e) per.set(t, (e = { samples: 0, complete: 0, names: new Set(), endedAt: new Map() }))
    let outer = null
    for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) {
      outer = name(p.stacks.frame[n])
      if (e.names.size < 4000) e.names.add(outer)
    }
    if (p.samples.idle[i]) continue
    const w = p.samples.weight ? p.samples.weight[i] : 1
    e.samples += w
    if (ROOTS.test(outer || '')) e.complete += w
    else e.endedAt.set(outer, (e.endedAt.get(outer) || 0) + w)
  }
  const threads = [...per].map(([t, e]) => ({
    tid: p.threads[t].tid,
    name: p.threads[t].name,
    kind: threadKind(p.threads[t], [...e.names]),
    samples: e.samples,
    complete: e.complete,
    share: e.samples ? e.complete / e.samples : null,
    endedAt: [...e.endedAt].sort((a, b) => b[1] - a[1]).slice(0, 3),
  }))
  return { threads, stats: Object.fromEntries(REASONS.map((k) => [k, p.stats[k]])) }
}

function run(ctx) {
  const ms = require(ROOT)
  const out = { note: `Share of running samples whose outermost frame is a thread entry point (_start, __libc_start_call_main, start_thread, clone3), sampled every 2 ms in CPU mode; per-thread figures for threads with at least ${MIN_SAMPLES} samples.`, nodes: {} }
  for (const major of [20, 22]) {
    const node = nodeOfMajor(major)
    if (!node) {
      out.nodes[major] = { skipped: `no Node ${major} binary (scripts/fetch-node.js failed)` }
      continue
    }
    const file = path.join(ctx.tmp, `unwind-${major}.machprof`)
    runNode(path.join(WL, 'unwind.js'), {
      node,
      env: { ...nativeThreadsEnv('sort'), BENCH_SECONDS: String(ctx.quick ? 2 : 5), BENCH_SAMPLER_INTERVAL: '2', BENCH_PROFILE_OUT: file },
    })
    const c = completeness(ms, file)
    const samples = c.threads.reduce((a, t) => a + t.samples, 0)
    const complete = c.threads.reduce((a, t) => a + t.complete, 0)
    const counted = c.threads.filter((t) => t.samples >= MIN_SAMPLES)
    const worst = counted.reduce((w, t) => (w && w.share <= t.share ? w : t), null)
    const kinds = {}
    for (const t of c.threads) {
      const k = (kinds[t.kind] ||= { threads: 0, samples: 0, complete: 0 })
      k.threads++
      k.samples += t.samples
      k.complete += t.complete
    }
    for (const k of Object.values(kinds)) k.share = k.samples ? k.complete / k.samples : null
    out.nodes[major] = { version: tool(node, ['-v']),  samples, overall: samples ? complete / samples : null, worst, kinds, threads: c.threads, stats: c.stats }
    ctx.log(`unwind node ${major}: ${((complete / samples) * 100).toFixed(1)} % of ${samples}; worst ${worst && `${worst.name} ${(worst.share * 100).toFixed(1)} %`}`)
  }
  return out
}

function rows(r) {
  const out = []
  for (const [major, x] of Object.entries(r.nodes)) {
    if (x.skipped) {
      out.push([`complete stacks, Node ${major}`, `skipped: ${x.skipped}`, '≥ 95 %', ''])
      continue
    }
    out.push([`complete stacks, Node ${major}: overall (${x.samples} running samples)`, pct(x.overall * 100, 1), '≥ 95 %', verdict(x.overall >= 0.95)])
    const w = x.worst
    if (w) out.push([`complete stacks, Node ${major}: worst thread with ≥ ${MIN_SAMPLES} samples`, `${pct(w.share * 100, 1)} (${w.kind}, "${w.name}", ${w.samples} samples${w.endedAt.length ? `; ends at ${w.endedAt.map(([n, c]) => `${n} ×${c}`).join(', ')}` : ''})`, '≥ 90 %', verdict(w.share >= 0.9)])
    for (const [k, v] of Object.entries(x.kinds).sort((a, b) => b[1].samples - a[1].samples)) {
      if (v.samples) out.push([`complete stacks, Node ${major}: ${k} (${v.threads} threads, ${v.samples} samples)`, pct(v.share * 100, 1), '', ''])
    }
    const st = x.stats
    out.push([`stacks ended, Node ${major} (stats): root / truncated copy / no unwind info / bad CFA / not executable / copy failed / depth cut`, [st.stacksReachingRoot, st.endedTruncatedCopy, st.endedNoUnwindInfo, st.endedBadCfa, st.endedNotExecutable, st.endedCopyFailed, st.truncatedStacks].join(' / '), '', ''])
  }
  return out
}

module.exports = { name: 'unwind', run, rows }
