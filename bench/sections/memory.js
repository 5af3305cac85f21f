'use strict'
// Memory and post-processing: bytes per stored sample of a long 1 kHz run;
// the stack-copy records' bound (as the session reports it) next to the
// resident memory a session adds; bufferSamples
// bounding the profile; and the time to symbolize and export N samples.
const path = require('path')
const { ROOT, WL, runNode, runJson, writeScript } = require('../lib/proc')
const { verdict } = require('../lib/table')

// Small enough that 4 busy threads at 1 kHz overflow it within a second.
const BUFFER_ROWS = 50

function post(ctx, prof) {
  const script = writeScript(
    ctx.tmp,
    'post.js',
    `const ms = require(${JSON.stringify(ROOT)})
const N = ${ctx.quick ? 200000 : 1000000}
const p = ms.loadProfile(${JSON.stringify(prof)})
const n = p.samples.thread.length
const tile = (a, C) => { const o = new C(N); for (let i = 0; i < N; i++) o[i] = a[i % n]; return o }
const big = { ...p, samples: { thread: tile(p.samples.thread, Uint32Array), timeNs: tile(p.samples.timeNs, BigUint64Array), stack: tile(p.samples.stack, Uint32Array), idle: tile(p.samples.idle, Uint8Array), cpuDeltaNs: tile(p.samples.cpuDeltaNs, BigUint64Array), weight: tile(p.samples.weight, Uint32Array) } }
const t = () => process.hrtime.bigint()
let t0 = t(); big.symbols = ms.symbolicate(big); const symMs = Number(t() - t0) / 1e6
t0 = t(); const again = ms.symbolicate(big); const symWarmMs = Number(t() - t0) / 1e6
t0 = t(); const pprof = ms.exportProfile(big, 'pprof'); const pprofMs = Number(t() - t0) / 1e6
t0 = t(); const ss = ms.exportProfile(big, 'speedscope'); const ssMs = Number(t() - t0) / 1e6
// 100,000 distinct addresses spread over the node binary's image: the
// symbolizer's own speed, cold in this process for these addresses.
const node = p.modules[0]
const U = 100000
const span = node.end - node.start
const unique = new BigUint64Array(U)
for (let i = 0; i < U; i++) unique[i] = node.start + (span * BigInt(i)) / BigInt(U)
const wide = { ...p, symbols: undefined, frames: { address: unique }, stacks: { frame: Uint32Array.from({ length: U }, (_, i) => i), parent: new Int32Array(U).fill(-1) }, samples: { thread: new Uint32Array([0]), timeNs: new BigUint64Array([p.samples.timeNs[0]]), stack: new Uint32Array([0]), idle: new Uint8Array([0]), cpuDeltaNs: new BigUint64Array([0n]), weight: new Uint32Array([1]) } }
t0 = t(); const wideSyms = ms.symbolicate(wide); const uniqueMs = Number(t() - t0) / 1e6
console.log(JSON.stringify({ samples: N, frames: p.frames.address.length, functions: again.functions.name.length, symbolizeColdMs: symMs, symbolizeWarmMs: symWarmMs, pprofMs, pprofBytes: pprof.length, speedscopeMs: ssMs, speedscopeBytes: ss.length, uniqueAddresses: U, symbolizeUniqueMs: uniqueMs, uniqueFunctions: wideSyms.functions.name.length }))`,
  )
  return runNode(script)
}

function run(ctx) {
  const seconds = ctx.quick ? 3 : 60
  const prof = path.join(ctx.tmp, 'mem.machprof')
  const r = runNode(path.join(WL, 'cpu.js'), { env: { BENCH_SECONDS: String(seconds), BENCH_SAMPLER_INTERVAL: '1', BENCH_PROFILE_OUT: prof } })
  const ms = require(ROOT)
  const p = ms.loadProfile(prof)
  const n = p.samples.thread.length
  // thread u32, timeNs u64, stack u32, idle u8, cpuDeltaNs u64, weight u32
  const bytes = { samples: n * (4 + 8 + 4 + 1 + 8 + 4), stacks: p.stacks.frame.length * 8, frames: p.frames.address.length * 8 }
  const total = bytes.samples + bytes.stacks + bytes.frames
  const rss = runJson(path.join(WL, 'rss.js'), { seconds: ctx.quick ? 2 : 5 })
  const capped = runJson(path.join(WL, 'rss.js'), { seconds: ctx.quick ? 2 : 5, bufferSamples: BUFFER_ROWS })
  const out = {
    seconds,
    hz: 1000,
    rows: n,
    samples: p.stats.samplesCaptured,
    stackNodes: p.stacks.frame.length,
    frames: p.frames.address.length,
    bytesPerRow: total / n,
    dedupedStackBytesPerRow: (bytes.stacks + bytes.frames) / n,
    stopMs: r.stopMs,
    // The records stack copies go to: one pool for all threads, its size
    // reported by the session (stats.captureBufferBytes).
    copyRecords: { totalBytes: p.stats.captureBufferBytes || null, rule: 'records = clamp(CPUs x per CPU, 32, 512), shared by all threads; per CPU 16 in wall mode, two drain periods of samples in CPU mode (40 at 1 kHz)' },
    rss: { sessionKiB: rss.duringKiB - rss.beforeKiB, afterStopKiB: rss.afterKiB - rss.beforeKiB, rows: rss.rows },
    bufferSamplesBound: { bound: BUFFER_ROWS, rows: capped.rows, samples: capped.samples, dropped: capped.dropped },
    post: post(ctx, prof),
  }
  ctx.log(`memory ${JSON.stringify(out)}`)
  return out
}

function rows(m) {
  const c = m.copyRecords
  const pp = m.post
  return [
    [`bytes per stored row (${m.seconds} s @1 kHz, ${m.rows} rows for ${m.samples} samples)`, `${m.bytesPerRow.toFixed(1)} (stacks and frames ${m.dedupedStackBytesPerRow.toFixed(1)})`, '', ''],
    ['stack-copy records (one pool for all threads, none per thread): in total on this machine, 1 kHz CPU mode', c.totalBytes ? `${(c.totalBytes / 2 ** 20).toFixed(2)} MiB reserved (${c.rule})` : 'not reported', 'stated bound', ''],
    ['resident memory added by a session (4 busy threads, 1 kHz): while sampling / after stop()', `${(m.rss.sessionKiB / 1024).toFixed(1)} / ${(m.rss.afterStopKiB / 1024).toFixed(1)} MiB (${m.rss.rows} rows)`, c.totalBytes ? `copy pool ≤ ${(c.totalBytes / 2 ** 20).toFixed(2)} MiB of it` : '', ''],
    [`bufferSamples: ${m.bufferSamplesBound.bound} bounds the profile (a run that overflows it)`, `${m.bufferSamplesBound.rows} rows kept, ${m.bufferSamplesBound.dropped} samples dropped`, `≤ ${m.bufferSamplesBound.bound} rows`, verdict(m.bufferSamplesBound.dropped > 0 ? m.bufferSamplesBound.rows <= m.bufferSamplesBound.bound : null)],
    [`symbolize ${pp.samples} samples (cold / warm)`, `${pp.symbolizeColdMs.toFixed(0)} / ${pp.symbolizeWarmMs.toFixed(0)} ms`, '≪ 1 s', ''],
    [`export ${pp.samples} samples: pprof / speedscope`, `${pp.pprofMs.toFixed(0)} / ${pp.speedscopeMs.toFixed(0)} ms`, '', ''],
    [`symbolize ${pp.uniqueAddresses} unique addresses`, `${pp.symbolizeUniqueMs.toFixed(0)} ms`, '≪ 1 s', ''],
    ['stop() after the long run', `${m.stopMs.toFixed(1)} ms`, '', ''],
  ]
}

module.exports = { name: 'memory', run, rows }
