'use strict'
// Checks shared by the scenarios: a profile's internal consistency, and
// small helpers for work that has a known right answer.
//
// A sample row stands for `samples.weight[i]` samples (at least 1): in CPU
// mode one timer signal can stand for several intervals (the kernel checks
// CPU timers at its tick), in wall mode an idle thread's unchanged stack
// is one row for its whole run. Every count of samples here is a sum of
// weights; rows are only storage.

const { types } = require('util')

/** Sum of the weights of the rows for which `keep(i)` holds (all rows by default). */
function weightSum(p, keep = null) {
  const w = p.samples.weight
  let sum = 0
  for (let i = 0; i < w.length; i++) if (!keep || keep(i)) sum += w[i]
  return sum
}

/** tid -> { busy, idle } sample counts (weights) of a profile. */
function samplesByTid(p) {
  const out = new Map()
  const s = p.samples
  for (let i = 0; i < s.thread.length; i++) {
    const tid = p.threads[s.thread[i]].tid
    let e = out.get(tid)
    if (!e) out.set(tid, (e = { busy: 0, idle: 0 }))
    if (s.idle[i]) e.idle += s.weight[i]
    else e.busy += s.weight[i]
  }
  return out
}

/**
 * 'ok', or what is wrong with a profile object returned by stop() (or
 * loaded from a file). With `mode` ('cpu' or 'wall', the mode the session
 * ran in), also what that mode promises:
 * - cpu (Linux: per-thread CPU-time timers): a sample is an interval of
 *   the thread's CPU time, so no row is idle and a row's cpuDeltaNs is its
 *   weight times the interval;
 * - wall: at most one sample per thread per sampler tick.
 */
function checkProfile(p, { mode } = {}) {
  if (!p || typeof p !== 'object') return 'not an object'
  const s = p.samples
  const n = s.thread.length
  if (!types.isUint32Array(s.thread) || !types.isUint32Array(s.stack) || !types.isUint8Array(s.idle)) return 'column types'
  if (!types.isUint32Array(s.weight)) return 'samples.weight is not a Uint32Array'
  if (!types.isBigUint64Array(s.timeNs) || !types.isBigUint64Array(s.cpuDeltaNs)) return 'time column types'
  for (const k of ['timeNs', 'stack', 'idle', 'cpuDeltaNs', 'weight']) if (s[k].length !== n) return `samples.${k} length ${s[k].length} != ${n}`
  const nodes = p.stacks.frame.length
  if (p.stacks.parent.length !== nodes) return 'stacks.parent length'
  const frames = p.frames.address.length
  for (let i = 0; i < nodes; i++) {
    if (p.stacks.parent[i] >= i || p.stacks.parent[i] < -1) return `stack ${i} has parent ${p.stacks.parent[i]}`
    if (p.stacks.frame[i] >= frames) return `stack ${i} has frame ${p.stacks.frame[i]} of ${frames}`
  }
  for (let i = 0; i < n; i++) {
    if (s.stack[i] >= nodes) return `sample ${i} has stack ${s.stack[i]} of ${nodes}`
    if (s.thread[i] >= p.threads.length) return `sample ${i} has thread ${s.thread[i]} of ${p.threads.length}`
    if (s.timeNs[i] < p.startTimeNs || s.timeNs[i] > p.endTimeNs) return `sample ${i} time outside the session`
    if (s.idle[i] > 1) return `sample ${i} idle=${s.idle[i]}`
    if (s.weight[i] < 1) return `sample ${i} has weight ${s.weight[i]} (at least 1)`
  }
  if (p.endTimeNs < p.startTimeNs) return 'session ends before it starts'
  if (mode === 'cpu' && process.platform === 'linux') {
    for (let i = 0; i < n; i++) {
      if (s.idle[i]) return `CPU mode: sample ${i} is idle (a CPU-time sample is of a running thread)`
      if (s.cpuDeltaNs[i] !== BigInt(s.weight[i]) * p.intervalNs) return `CPU mode: sample ${i} has weight ${s.weight[i]} but cpuDeltaNs ${s.cpuDeltaNs[i]} (interval ${p.intervalNs} ns)`
    }
  } else if (mode === 'wall') {
    for (const [tid, e] of samplesByTid(p)) {
      if (e.busy + e.idle > p.stats.ticks) return `wall mode: thread ${tid} has ${e.busy + e.idle} samples in ${p.stats.ticks} ticks`
    }
  } else if (mode !== undefined) {
    return `unknown mode ${mode}`
  }
  return checkStats(p)
}

/**
 * The profile's statistics agree with its samples (counted by weight). A
 * start() racing a stop() on another JS thread used to break exactly this
 * (stress/repro/concurrent-start-stop.js, fixed in 87a9ac3).
 */
function checkStats(p) {
  const st = p.stats
  const captured = weightSum(p)
  if (st.samplesCaptured !== captured) return `stats: samplesCaptured ${st.samplesCaptured} != ${captured} samples (weights of ${p.samples.weight.length} rows)`
  if (st.threadsSampled !== st.samplesCaptured + st.samplesDropped) return `stats: threadsSampled ${st.threadsSampled} != captured ${st.samplesCaptured} + dropped ${st.samplesDropped}`
  // Idle samples are counted when taken; one whose row did not fit is
  // counted as dropped too.
  const idle = weightSum(p, (i) => p.samples.idle[i] === 1)
  if (st.idleSamples < idle || st.idleSamples > idle + st.samplesDropped) return `stats: idleSamples ${st.idleSamples}, but the idle rows weigh ${idle} (dropped ${st.samplesDropped})`
  return 'ok'
}

function spin(ms) {
  const end = Date.now() + ms
  let x = 0
  while (Date.now() < end) x += Math.sqrt(x + 1)
  return x
}

function sleep(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

const delay = (ms) => new Promise((r) => setTimeout(r, ms))

/** A small deterministic PRNG (mulberry32), so a failing run can be replayed. */
function rng(seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

module.exports = { checkProfile, checkStats, weightSum, samplesByTid, spin, sleep, delay, rng }
