'use strict'
// What a profile should hold, from the threads' own CPU time.
//
// In CPU mode each thread is interrupted after every interval of its own
// CPU time (schedstat's first field, the clock its timer runs on), so a
// thread's samples (weights) over a session are at most its CPU time in
// that session / interval, and close to it once its timer is set. On a
// loaded 2-core machine a busy thread may get a fraction of a core: wall
// time says nothing about its samples. Timers are set by the sampler
// thread when it has found the threads, after start() returned, which on a
// loaded machine can take tens of milliseconds; so the lower bound counts
// CPU time from the moment the calling thread's timer exists.
//
// Usage: `const w = cpuWindow()` just before start(), `w.armed()` right
// after it (CPU mode), `w.end()` just after stop() returns, then
// `account(p, w)`. Grandchild programs require this file by its absolute
// path and print what account() returned.

const fs = require('fs')
const { posixTimers } = require('./probe')

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

const ownTid = () => Number(fs.readlinkSync('/proc/thread-self').split('/').pop())

/**
 * CPU time of every thread at the start of a session. armed(): waits
 * (sleeping) until the calling thread has its CPU timer (`count` of them
 * when that many samplers run in CPU mode), and the other threads that
 * existed at the start and have run since have theirs (for at most
 * `othersMs` more), taking each thread's CPU time at the moment its own
 * timer is first seen: the sampler thread sets them one after another,
 * and on a loaded machine a worker's may come tens of milliseconds after
 * the caller's. A thread whose timer was not seen has no armed time (no
 * lower bound is applied to it). end(): the snapshot at the end.
 */
function cpuWindow() {
  const w = { before: taskCpu(), armedAt: null, armedAfterMs: null, unarmed: null, after: null }
  w.armed = ({ timeoutMs = 2000, othersMs = 100, count = 1 } = {}) => {
    const own = ownTid()
    const t0 = Date.now()
    const nap = new Int32Array(new SharedArrayBuffer(4))
    const armedAt = new Map()
    let pending = []
    for (;;) {
      const timers = posixTimers()
      if (!timers) break
      const perTid = new Map()
      for (const t of timers) perTid.set(t.tid, (perTid.get(t.tid) || 0) + 1)
      const now = taskCpu()
      for (const [tid, e] of now) if (!armedAt.has(tid) && (perTid.get(tid) || 0) >= count) armedAt.set(tid, e)
      // Threads that ran since the start (an idle one, like a thread in
      // sigwait(), may never get a timer and has no CPU time to count).
      pending = [...now.keys()].filter((tid) => {
        const b = w.before.get(tid)
        return b && !armedAt.has(tid) && now.get(tid).ns > b.ns && !now.get(tid).comm.startsWith('machsampler')
      })
      const waited = Date.now() - t0
      if (waited > timeoutMs || (armedAt.has(own) && (pending.length === 0 || waited > othersMs))) break
      Atomics.wait(nap, 0, 0, 1)
    }
    w.armedAfterMs = Date.now() - t0
    w.armedAt = armedAt
    w.unarmed = pending.length
    return w
  }
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
 * existed at both ends of the window; `armedIntervals` is a whole thread's
 * CPU time from armed() on (its intervals otherwise). A thread born inside
 * the window counts all its CPU time; one that died inside it cannot be
 * measured and is left out.
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
    const armed = w.armedAt ? w.armedAt.get(tid) : b
    const s = samples.get(tid) || { busy: 0, idle: 0 }
    const cpuNs = a.ns - (b ? b.ns : 0)
    threads.push({
      tid,
      comm: a.comm,
      intervalNs: interval,
      cpuNs,
      intervals: cpuNs / interval,
      armedIntervals: b && armed ? (a.ns - armed.ns) / interval : null,
      busy: s.busy,
      idle: s.idle,
      whole: !!b,
    })
  }
  return { intervalNs: interval, ticks: p.stats.ticks, lost: p.stats.samplesLost, armedAfterMs: w.armedAfterMs, unarmed: w.unarmed, threads }
}

/**
 * Adds one session's account to a running total per tid (for checks over
 * many short sessions).
 */
function addAccount(total, acc) {
  for (const t of acc.threads) {
    let e = total.get(t.tid)
    if (!e) total.set(t.tid, (e = { tid: t.tid, comm: t.comm, intervalNs: t.intervalNs, intervals: 0, busy: 0, armedIntervals: 0, armedBusy: 0, sessions: 0, armedSessions: 0 }))
    e.intervals += t.intervals
    e.busy += t.busy
    e.sessions++
    if (t.armedIntervals !== null) {
      e.armedIntervals += t.armedIntervals
      e.armedBusy += t.busy
      e.armedSessions++
    }
  }
  return total
}

// A session loses a little of each thread's CPU time at its end: the
// kernel checks a CPU timer at its tick (4 ms at HZ=250), so up to a tick
// of CPU before stop() deletes the timer counts no sample. Allowed per
// thread and session:
const LOSS_PER_SESSION_NS = 5e6

/**
 * Problems with CPU-mode samples against CPU time, as messages (empty when
 * all is well):
 * - no thread may have more samples than intervals of CPU it used (plus
 *   one per session, for the rounding of a window's two ends);
 * - a thread that used at least `minIntervals` intervals from the moment
 *   timers were set to the end of its sessions must have at least
 *   `minRatio` of them as samples, less the stop loss of each session.
 * `threads` is an account's list or an addAccount() total's values.
 */
function cpuProblems(threads, { minRatio = 0.8, minIntervals = 200, only = null } = {}) {
  const out = []
  for (const t of threads) {
    if (only && !only(t)) continue
    const sessions = t.sessions || 1
    if (t.busy > t.intervals * 1.01 + sessions) out.push(`thread ${t.tid} (${t.comm}): ${t.busy} samples for ${t.intervals.toFixed(1)} intervals of CPU time`)
    if (t.armedIntervals === null) continue
    const armedBusy = t.armedBusy ?? t.busy
    const armedSessions = t.armedSessions ?? 1
    const loss = (LOSS_PER_SESSION_NS * armedSessions) / t.intervalNs
    if (t.armedIntervals >= minIntervals && armedBusy < t.armedIntervals * minRatio - loss) {
      out.push(
        `thread ${t.tid} (${t.comm}): ${armedBusy} samples for ${t.armedIntervals.toFixed(0)} intervals of CPU time once timers were set, in ${armedSessions} sessions (fewer than ${minRatio} of them, less ${loss.toFixed(0)} for the sessions' ends)`,
      )
    }
  }
  return out
}

/**
 * Problems with one session's samples of the threads that were busy
 * (`busy(t)` picks them; by default those that lived through the session
 * and used `minIntervals` of CPU once timers were set), judged by what
 * `mode` promises:
 * - cpu: cpuProblems(), and each busy thread has samples;
 * - wall: each busy thread has busy samples, and a sample (busy or idle)
 *   at most every tick and at least at `minTickShare` of the ticks (a
 *   thread whose previous signal is still pending is skipped).
 * `acc` is an account() (as a grandchild printed it).
 */
function judge(acc, mode, { minIntervals = 100, busy = null, minTickShare = 0.7 } = {}) {
  const isBusy = busy || ((t) => t.whole && (t.armedIntervals ?? t.intervals) >= minIntervals)
  const out = []
  const threads = acc.threads.filter(isBusy)
  if (threads.length === 0) out.push(`no busy thread (${JSON.stringify(acc.threads.map((t) => [t.comm, Math.round(t.intervals)]))})`)
  if (mode === 'cpu') {
    out.push(...cpuProblems(acc.threads, { minIntervals }))
    for (const t of threads) if (t.busy === 0) out.push(`thread ${t.tid} (${t.comm}): no sample for ${t.intervals.toFixed(0)} intervals of CPU time`)
  } else {
    for (const t of threads) {
      const all = t.busy + t.idle
      if (t.busy === 0 || all > acc.ticks || all < acc.ticks * minTickShare) out.push(`thread ${t.tid} (${t.comm}): ${t.busy} busy and ${t.idle} idle samples in ${acc.ticks} ticks`)
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

module.exports = { taskCpu, cpuWindow, account, addAccount, cpuProblems, judge, summary }
