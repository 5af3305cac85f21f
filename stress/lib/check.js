'use strict'
// Checks shared by the scenarios: a profile's internal consistency, and
// small helpers for work that has a known right answer.

const { types } = require('util')

/** 'ok', or what is wrong with a profile object returned by stop(). */
function checkProfile(p) {
  if (!p || typeof p !== 'object') return 'not an object'
  const s = p.samples
  const n = s.thread.length
  if (!types.isUint32Array(s.thread) || !types.isUint32Array(s.stack) || !types.isUint8Array(s.idle)) return 'column types'
  if (!types.isBigUint64Array(s.timeNs) || !types.isBigUint64Array(s.cpuDeltaNs)) return 'time column types'
  for (const k of ['timeNs', 'stack', 'idle', 'cpuDeltaNs']) if (s[k].length !== n) return `samples.${k} length ${s[k].length} != ${n}`
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
  }
  if (p.endTimeNs < p.startTimeNs) return 'session ends before it starts'
  return checkStats(p)
}

/**
 * The profile's statistics agree with its samples. A start() racing a
 * stop() on another JS thread used to break exactly this
 * (stress/repro/concurrent-start-stop.js, fixed in 87a9ac3).
 */
function checkStats(p) {
  const n = p.samples.thread.length
  const st = p.stats
  if (st.samplesCaptured !== n) return `stats: samplesCaptured ${st.samplesCaptured} != ${n} samples`
  if (st.threadsSampled !== st.samplesCaptured + st.samplesDropped) return `stats: threadsSampled ${st.threadsSampled} != captured ${st.samplesCaptured} + dropped ${st.samplesDropped}`
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

module.exports = { checkProfile, checkStats, spin, sleep, delay, rng }
