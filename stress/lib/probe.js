'use strict'
// The signal probe (signal-probe.c, a test-only addon built with gcc on
// first use) and what the scenarios check with it: that no sampling
// signal arrives once stop() has returned, and that a fork()ed or spawned
// child, which runs no sampler, receives none.

const { execFileSync } = require('child_process')
const crypto = require('crypto')
const fs = require('fs')
const path = require('path')

const ROOT = path.join(__dirname, '..', '..')

/** Path of the probe addon, compiled once per source version. */
function probePath() {
  const src = path.join(__dirname, 'signal-probe.c')
  const hash = crypto.createHash('sha256').update(fs.readFileSync(src)).digest('hex').slice(0, 12)
  const dir = path.join(ROOT, '.cache', 'stress')
  const so = path.join(dir, `signal-probe-${hash}.node`)
  if (!fs.existsSync(so)) {
    fs.mkdirSync(dir, { recursive: true })
    const tmp = `${so}.${process.pid}.tmp`
    execFileSync('gcc', ['-O1', '-g', '-Wall', '-Werror', '-fPIC', '-shared', '-o', tmp, src])
    fs.renameSync(tmp, so)
  }
  return so
}

let loaded = null
function probe() {
  loaded ||= require(probePath())
  return loaded
}

/** Signals this process has a handler for (SigCgt of /proc/self/status). */
function caughtSignals() {
  const mask = BigInt('0x' + /SigCgt:\s+(\w+)/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1])
  const out = new Set()
  for (let s = 1; s <= 64; s++) if ((mask >> BigInt(s - 1)) & 1n) out.add(s)
  return out
}

/**
 * Signals the sampler may be using, by their handlers: SIGURG and the
 * real-time signals this process has a handler for (a process that handles
 * SIGURG itself, or a second copy of the addon, puts the sampler on a
 * real-time one).
 */
function samplingSignals() {
  if (process.platform !== 'linux') return []
  const s = probe().signals()
  return [...caughtSignals()].filter((n) => n === s.urg || (n >= s.rtmin && n <= s.rtmax))
}

/**
 * Counts the signals `sigs` that arrive while `fn()` runs, process-wide
 * (their handlers are replaced by counters meanwhile, then restored).
 */
function countSignals(sigs, fn) {
  const P = probe()
  // A signal whose action cannot be set (EINVAL: the runtime keeps it, as
  // valgrind does the top real-time signals, whose handlers then show in
  // SigCgt) cannot be the sampler's either: it is left out and listed.
  const armed = []
  const unwatchable = []
  let got = []
  try {
    for (const s of sigs) {
      try {
        P.arm(s)
        armed.push(s)
      } catch (e) {
        if (e.code !== 'EINVAL') throw e
        unwatchable.push(s)
      }
    }
    fn()
  } finally {
    got = armed.map((s) => P.disarm(s))
  }
  const first = got.find((t) => t.count)
  return {
    count: got.reduce((a, t) => a + t.count, 0),
    timer: got.reduce((a, t) => a + t.timer, 0),
    queued: got.reduce((a, t) => a + t.queued, 0),
    firstAfterMs: first ? +(first.firstAfterNs / 1e6).toFixed(2) : null,
    tid: first ? first.firstTid : null,
    unwatchable,
  }
}

/**
 * The POSIX timers of a process (/proc/<pid>/timers): { id, signal, tid }
 * each, tid being the thread a SIGEV_THREAD_ID timer signals. null if the
 * kernel does not list them.
 */
function posixTimers(pid = 'self') {
  let text
  try {
    text = fs.readFileSync(`/proc/${pid}/timers`, 'utf8')
  } catch {
    return null
  }
  const out = []
  for (const block of text.split(/^(?=ID: )/m)) {
    const id = /^ID: (\d+)/.exec(block)
    if (!id) continue
    const sig = /^signal: (\d+)\//m.exec(block)
    const tid = /^notify: \S+\/tid\.(\d+)/m.exec(block)
    out.push({ id: Number(id[1]), signal: sig ? Number(sig[1]) : 0, tid: tid ? Number(tid[1]) : 0 })
  }
  return out
}

module.exports = { probe, probePath, caughtSignals, samplingSignals, countSignals, posixTimers }
