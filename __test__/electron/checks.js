'use strict'
// What the Node suites assert about a profile (__test__/api.test.js: the
// profile's shape and accounting; __test__/darwin.test.js: every busy
// thread sampled, untagged and aligned addresses, no walk errors on macOS),
// as plain functions for a process without jest: Electron's main process.

const assert = require('assert/strict')
const util = require('util')

/** Per-thread sample counts and the deepest stack, keyed by tid. */
function perThread(p) {
  const out = new Map()
  for (const t of p.threads) out.set(t.tid, { samples: 0, idle: 0, maxDepth: 0, isMain: t.isMain, name: t.name })
  for (let i = 0; i < p.samples.thread.length; i++) {
    const e = out.get(p.threads[p.samples.thread[i]].tid)
    e.samples++
    e.idle += p.samples.idle[i]
    let d = 0
    for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) d++
    e.maxDepth = Math.max(e.maxDepth, d)
  }
  return out
}

/** The shape and accounting of a profile from `stop()` or `loadProfile()`. */
function checkProfile(p, { intervalMs }) {
  assert.equal(p.version, 1)
  // A row stands for `weight` samples (CPU mode's intervals, idle runs).
  assert.ok(util.types.isUint32Array(p.samples.weight))
  assert.equal(p.stats.samplesCaptured, p.samples.weight.reduce((a, w) => a + w, 0))
  assert.ok(p.samples.thread.length <= p.stats.samplesCaptured)
  assert.equal(p.stats.threadsSampled, p.stats.samplesCaptured + p.stats.samplesDropped)
  assert.ok(util.types.isUint32Array(p.samples.thread))
  assert.ok(util.types.isBigUint64Array(p.samples.timeNs))
  assert.ok(util.types.isUint32Array(p.samples.stack))
  assert.ok(util.types.isUint8Array(p.samples.idle))
  assert.ok(util.types.isUint32Array(p.stacks.frame))
  assert.ok(util.types.isInt32Array(p.stacks.parent))
  assert.ok(util.types.isBigUint64Array(p.frames.address))
  assert.equal(typeof p.startTimeNs, 'bigint')
  assert.equal(p.intervalNs, BigInt(intervalMs) * 1000000n)
  assert.ok(p.endTimeNs > p.startTimeNs)
  assert.ok(p.threads.some((t) => t.isMain), 'the main thread is in the profile')
  for (const t of p.threads) {
    assert.equal(typeof t.tid, 'number')
    assert.equal(typeof t.name, 'string')
  }
  // Every sample's stack is a chain of nodes ending at a root.
  for (let i = 0; i < p.samples.stack.length; i++) {
    let n = p.samples.stack[i]
    let steps = 0
    while (n !== -1) {
      assert.ok(n < p.stacks.frame.length, `stack node ${n} out of range`)
      n = p.stacks.parent[n]
      assert.ok(++steps < 2000, 'a stack chain loops')
    }
  }
}

/** A busy main thread sampled at the configured rate, and what the Mach backend must give. */
function checkSampling(p, { intervalMs, busyMs }) {
  const threads = perThread(p)
  const main = [...threads.values()].find((t) => t.isMain)
  assert.ok(main, 'the main thread was sampled')
  // Busy for busyMs: about busyMs / intervalMs samples, most of them running.
  const expected = busyMs / intervalMs
  assert.ok(main.samples > expected * 0.5, `main thread: ${main.samples} samples, expected about ${expected}`)
  assert.ok(main.samples - main.idle > expected * 0.5, 'the busy main thread was seen running')
  assert.ok(main.maxDepth > 5, `main thread stacks are ${main.maxDepth} frames deep at most`)
  assert.ok(threads.size > 3, `only ${threads.size} threads in the profile`)
  if (process.platform === 'darwin') {
    assert.equal(p.stats.walkErrors, 0)
    const addrs = Array.from(p.frames.address).filter((a) => a !== 0n)
    // User-space addresses are below 2^47; a higher bit would be a
    // pointer-authentication tag left in.
    for (const a of addrs) assert.ok(a < 1n << 47n, `tagged address 0x${a.toString(16)}`)
    // A64 instructions are 4-byte aligned: every pc and return address.
    if (process.arch === 'arm64') assert.equal(addrs.filter((a) => a % 4n !== 0n).length, 0)
  }
  return threads
}

/** Names from `symbolicate()`: one function per frame, and named native code. */
function checkSymbols(p) {
  const s = p.symbols
  assert.ok(s, 'the profile has symbols')
  assert.equal(s.frameFunction.length, p.frames.address.length)
  assert.equal(s.frameLine.length, p.frames.address.length)
  const f = s.functions
  for (const i of s.frameFunction) assert.ok(i < f.name.length, `function index ${i} out of range`)
  for (const k of f.kind) assert.ok(['native', 'js', 'unknown'].includes(k), `kind ${k}`)
  const named = f.name.filter((n, i) => f.kind[i] === 'native' && !n.startsWith('0x'))
  // System libraries export their functions, so some native frames are
  // always named (the main thread's zlib, threads waiting in the kernel).
  assert.ok(named.length > 0, 'no native frame was named')
  return named
}

module.exports = { perThread, checkProfile, checkSampling, checkSymbols }
