'use strict'
// What a CPU-mode profile should hold, from the threads' own CPU time.
//
// In CPU mode each thread is interrupted after every interval of its own
// CPU time (schedstat's first field, the clock its timer runs on), so a
// thread's samples (weights) over a session are at most its CPU time in
// that session / interval, and close to it for a thread that lived
// through the session. On a loaded 2-core machine a busy thread may get a
// fraction of a core: wall time says nothing about its samples.
//
// Usage: `const w = cpuWindow()` just before start(), `w.end()` just after
// stop() returns, then `account(p, w)`. Grandchild programs require this
// file by its absolute path and print what account() returned.

const fs = require('fs')

/** tid -> { ns, comm } for every thread of this process, now. */
function taskCpu() {
  const out = new Map()
  let tids = []
  try {
    tids = fs.readdirSync('/proc/self/task')
  } catch {
    return out
  }
  for (const t of tids) {
    try {
      const ns = Number(fs.readFileSync(`/proc/self/task/${t}/schedstat`, 'utf8').split(' ')[0])
      const comm = fs.readFileSync(`/proc/self/task/${t}/comm`, 'utf8').trim()
      out.set(Number(t), { ns, comm })
    } catch {
      // Gone meanwhile.
    }
  }
  return out
}

/** CPU time of every thread at the start of a session; end() at its end. */
function cpuWindow() {
  const w = { before: taskCpu(), after: null }
  w.end = () => {
    w.after = taskCpu()
    return w
  }
  return w
}

/**
 * Per thread of the process: CPU time during the window, and the samples
 * (weights; busy and idle) the profile gives it. The sampler's own thread
 * ('machsampler', never sampled) is left out. `whole` marks threads that
 * existed at both ends of the window: their timers ran from (about) the
 * start to the end. A thread born inside the window counts all its CPU
 * time; one that died inside it cannot be measured and is left out.
 */
function account(p, w) {
  const interval = Number(p.intervalNs)
  const samples = new Map()
  for (let i = 0; i < p.samples.thread.length; i++) {
    const tid = p.threads[p.samples.thread[i]].tid
    let e = samples.get(tid)
    if (!e) samples.set(tid, (e = { busy: 0, idle: 0 }))
    if (p.samples.idle[i]) e.idle += p.samples.weight[i]
    else e.busy += p.samples.weight[i]
  }
  const threads = []
  for (const [tid, a] of w.after) {
    if (a.comm === 'machsampler') continue
    const b = w.before.get(tid)
    const s = samples.get(tid) || { busy: 0, idle: 0 }
    threads.push({ tid, comm: a.comm, intervalNs: interval, cpuNs: a.ns - (b ? b.ns : 0), intervals: (a.ns - (b ? b.ns : 0)) / interval, busy: s.busy, idle: s.idle, whole: !!b })
  }
  return { intervalNs: interval, ticks: p.stats.ticks, threads }
}

/**
 * Adds one session's account to a running total per tid (for checks over
 * many short sessions).
 */
function addAccount(total, acc) {
  for (const t of acc.threads) {
    let e = total.get(t.tid)
    if (!e) total.set(t.tid, (e = { tid: t.tid, comm: t.comm, intervalNs: t.intervalNs, intervals: 0, busy: 0, wholeIntervals: 0, wholeBusy: 0, sessions: 0, wholeSessions: 0 }))
    e.intervals += t.intervals
    e.busy += t.busy
    e.sessions++
    if (t.whole) {
      e.wholeIntervals += t.intervals
      e.wholeBusy += t.busy
      e.wholeSessions++
    }
  }
  return total
}

// A session loses some of each thread's CPU time to its two ends: timers
// are set once the sampler thread has found the threads (it runs after
// start() returns), and the kernel checks a CPU timer at its tick (4 ms at
// HZ=250), so up to a tick of CPU before stop() deletes the timer counts
// no sample. Allowed per thread and session, in intervals of 1 ms:
const LOSS_PER_SESSION = 5

/**
 * Problems with CPU-mode samples against CPU time, as messages (empty when
 * all is well):
 * - no thread may have more samples than intervals of CPU it used (plus
 *   one per session, for the rounding of a window's two ends);
 * - a thread that used at least `minIntervals` intervals while living
 *   through its sessions must have at least `minRatio` of them as
 *   samples, less the start-up and stop losses of each session.
 * `threads` is an account's list or an addAccount() total's values.
 */
function cpuProblems(threads, { minRatio = 0.8, minIntervals = 200, only = null } = {}) {
  const out = []
  for (const t of threads) {
    if (only && !only(t)) continue
    const sessions = t.sessions || 1
    if (t.busy > t.intervals * 1.01 + sessions) out.push(`thread ${t.tid} (${t.comm}): ${t.busy} samples for ${t.intervals.toFixed(1)} intervals of CPU time`)
    const wi = t.wholeIntervals ?? (t.whole ? t.intervals : 0)
    const wb = t.wholeBusy ?? (t.whole ? t.busy : 0)
    const ws = t.wholeSessions ?? (t.whole ? 1 : 0)
    const loss = (LOSS_PER_SESSION * ws * 1e6) / t.intervalNs
    if (wi >= minIntervals && wb < wi * minRatio - loss) {
      out.push(`thread ${t.tid} (${t.comm}): ${wb} samples for ${wi.toFixed(0)} intervals of CPU time in ${ws} sessions (fewer than ${minRatio} of them, less ${loss.toFixed(0)} for the sessions' ends)`)
    }
  }
  return out
}

/** Samples and CPU intervals of a set of threads, summed (for info). */
function summary(threads) {
  let busy = 0
  let intervals = 0
  for (const t of threads) {
    busy += t.busy
    intervals += t.intervals
  }
  return { samples: busy, cpuIntervals: Math.round(intervals), ratio: intervals ? +(busy / intervals).toFixed(3) : null }
}

module.exports = { taskCpu, cpuWindow, account, addAccount, cpuProblems, summary }
