'use strict'
// The sampler as the scenarios drive it: on at 1 kHz for the whole
// scenario, optionally stopped and restarted every `churnMs` (start/stop
// churn on top of the scenario's own load), in CPU mode, wall mode, or
// alternating between them at every restart. Every profile is checked
// (check.js, with what its mode promises), and so is every gap between two
// sessions: once stop() has returned, no sampling signal may arrive (the
// signal probe counts them for a few milliseconds while the threads keep
// running). CPU-mode sessions are accounted against each thread's CPU
// time (cpu.js); checkCpu() judges the totals at the end.

const ms = require('../..')
const { cpuWindow, account, addAccount, cpuProblems, summary } = require('./cpu')
const fs = require('fs')
const { samplingSignals, countSignals, posixTimers } = require('./probe')

/** Busy-waits `ms` milliseconds on this thread. */
function spinMs(t) {
  const end = process.hrtime.bigint() + BigInt(Math.round(t * 1e6))
  let x = 0
  while (process.hrtime.bigint() < end) x += Math.sqrt(x + 1)
  return x
}

/** What identifies a session's statistics: another session started meanwhile if these changed. */
const statsKey = (st) => `${st.ticks}/${st.samplesCaptured}/${st.threadsSampled}/${st.samplerCpuNs}`

/**
 * After a stop() that returned `p`: counts sampling signals arriving in
 * the next `quietMs` while this process keeps running. Returns null when
 * the measure is void (another JS thread started a session meanwhile).
 */
function quietAfterStop(p, quietMs = 3) {
  const sigs = samplingSignals()
  if (sigs.length === 0) return { noSignal: true }
  const q = countSignals(sigs, () => spinMs(quietMs))
  // Timers are deleted by stop(): none with the sampling signal is left.
  const timers = posixTimers()
  const leftTimers = timers ? timers.filter((t) => sigs.includes(t.signal)).length : 0
  if (ms.isRunning() || statsKey(ms.stats()) !== statsKey(p.stats)) return null
  return { ...q, leftTimers, signals: sigs, ms: quietMs }
}

/** Checks a quiet() result: no signal may arrive after stop() returned. */
function checkQuiet(c, q, mode, what) {
  if (!q) return
  if (!c.ok(!q.noSignal, `${what}: no handler for SIGURG or a real-time signal after a session: which signal does the sampler use?`)) return
  c.ok(q.leftTimers === 0, `${what} (${mode} mode): ${q.leftTimers} POSIX timers with the sampling signal left after stop() returned`)
  const msg = () =>
    `${what} (${mode} mode): ${q.count} sampling signal(s) arrived in the ${q.ms} ms after stop() returned (${q.timer} from CPU timers, ${q.queued} queued by the sampler thread; the first ${q.firstAfterMs} ms after, on thread ${q.tid})`
  c.ok(q.count === 0, msg)
}

class Sampling {
  /**
   * mode: 'cpu', 'wall', or 'alternate' (cpu first, then wall, at every
   * restart). quietMs: how long to watch for late signals after each stop
   * (0: not at all).
   */
  constructor(c, { intervalMs = 1, churnMs = 0, what = 'sampler', onProfile = null, mode = 'cpu', quietMs = 3 } = {}) {
    this.c = c
    this.onProfile = onProfile
    this.modes = mode === 'alternate' ? ['cpu', 'wall'] : [mode]
    this.intervalMs = intervalMs
    this.quietMs = quietMs
    /** Non-idle samples per tid, over every session: all modes, and per mode. */
    this.busyByTid = new Map()
    this.busyByMode = { cpu: new Map(), wall: new Map() }
    this.sessionsByMode = { cpu: 0, wall: 0 }
    /** CPU-mode sessions: tid -> samples and CPU intervals (cpu.js addAccount). */
    this.cpuTotal = new Map()
    this.quiet = { checked: 0, void: 0, late: 0 }
    this.what = what
    this.sessions = 0
    this.timer = null
    this.next = 0
    this.raced = 0
    this.begin()
    if (churnMs > 0) {
      this.timer = setInterval(() => this.restart(), churnMs)
    }
  }

  /** The options of the next session (bad-input-js restarts with them). */
  get options() {
    return { intervalMs: this.intervalMs, mode: this.modes[this.next % this.modes.length] }
  }

  /** Starts a session of the next mode; false if another JS thread has one running. */
  begin() {
    const options = this.options
    const window = cpuWindow()
    try {
      ms.start(options)
    } catch (e) {
      this.mine = null
      if (!this.c.ok(e.code === 'EAGAIN', `start() threw ${e.code}: ${e.message}`)) return false
      this.raced++
      return false
    }
    this.next++
    // Count CPU from the moment timers are set (see cpu.js).
    if (options.mode === 'cpu' && process.platform === 'linux') window.armed()
    this.mine = { mode: options.mode, window }
    return true
  }

  /**
   * Stops, checks the profile, watches for late signals, starts again.
   * Another thread may have stopped or started the sampler in between (the
   * sampler is process-wide): ESRCH and EAGAIN are the documented answers
   * then.
   */
  restart() {
    let p = null
    try {
      p = this.collect(ms.stop())
    } catch (e) {
      if (!this.c.ok(e.code === 'ESRCH', `stop() threw ${e.code}: ${e.message}`)) return
      this.raced++
    }
    if (p && this.quietMs > 0 && this.last.mode) this.watchQuiet(p, this.last.mode)
    this.begin()
  }

  watchQuiet(p, mode) {
    const q = quietAfterStop(p, this.quietMs)
    if (!q) {
      this.quiet.void++
      return
    }
    this.quiet.checked++
    if (q.count) this.quiet.late++
    checkQuiet(this.c, q, mode, `${this.what} session ${this.sessions}`)
  }

  /**
   * Checks a profile stop() returned. If this session is not the one we
   * started (our start lost a race to another JS thread's), its mode is
   * unknown: only the mode-independent checks apply.
   */
  collect(p) {
    const mine = this.mine
    this.mine = null
    const mode = mine ? mine.mode : undefined
    this.sessions++
    this.c.profile(p, `${this.what} session ${this.sessions}${mode ? ` (${mode} mode)` : ''}`, mode)
    if (mode) this.sessionsByMode[mode]++
    for (let i = 0; i < p.samples.thread.length; i++) {
      if (p.samples.idle[i]) continue
      const tid = p.threads[p.samples.thread[i]].tid
      const w = p.samples.weight[i]
      this.busyByTid.set(tid, (this.busyByTid.get(tid) || 0) + w)
      if (mode) this.busyByMode[mode].set(tid, (this.busyByMode[mode].get(tid) || 0) + w)
    }
    if (mode === 'cpu' && process.platform === 'linux') {
      const acc = account(p, mine.window.end())
      addAccount(this.cpuTotal, acc)
      // Never more samples than intervals of CPU time, session by session.
      for (const m of cpuProblems(acc.threads, { minIntervals: Infinity })) this.c.ok(false, `${this.what} session ${this.sessions}: ${m}`)
      this.c.checks++
    }
    if (this.onProfile) this.onProfile(p, mode)
    this.last = { p, mode }
    return p
  }

  /** Stops for good (watching for late signals); returns the last profile. */
  stop() {
    if (this.timer) clearInterval(this.timer)
    if (!ms.isRunning()) this.begin() // a worker stopped it last
    const p = this.collect(ms.stop())
    if (this.quietMs > 0 && this.last.mode) this.watchQuiet(p, this.last.mode)
    return p
  }

  /**
   * Judges CPU-mode samples against CPU time over all sessions: threads
   * that used `minIntervals` intervals while living through their
   * sessions got at least `minRatio` of them as samples. `only(t)` picks
   * the threads to judge.
   */
  checkCpu(opts = {}) {
    if (process.platform !== 'linux') return
    const threads = [...this.cpuTotal.values()]
    for (const m of cpuProblems(threads, { ...opts, minRatio: opts.minRatio ?? 0.8 })) this.c.ok(false, `${this.what}, CPU-mode sessions: ${m}`)
    this.c.checks++
    return summary(threads)
  }

  /**
   * Looks at the process's POSIX timers now (call it every few tens of
   * milliseconds while sessions run): in a CPU-mode session every thread
   * has one, and a thread's timer goes when the thread does, so timers of
   * threads that exited are few and short-lived (the sampler deletes them
   * when it next lists threads); a wall-mode session has none.
   */
  watchTimers() {
    if (process.platform !== 'linux' || !this.mine || !ms.isRunning()) return
    const timers = posixTimers()
    if (!timers) return
    const alive = new Set(fs.readdirSync('/proc/self/task').map(Number))
    const w = (this.timerWatch ||= { looks: 0, maxTimers: 0, maxStale: 0, wallTimers: 0 })
    w.looks++
    if (this.mine.mode === 'wall') {
      w.wallTimers = Math.max(w.wallTimers, timers.length)
      return
    }
    w.maxTimers = Math.max(w.maxTimers, timers.length)
    w.maxStale = Math.max(w.maxStale, timers.filter((t) => !alive.has(t.tid)).length)
  }

  /** Checks what watchTimers() saw. `maxStale`: timers of exited threads allowed at once. */
  checkTimers(maxStale) {
    const w = this.timerWatch
    if (!this.c.ok(w && w.looks > 0, `${this.what}: the timers were never looked at`)) return
    this.c.ok(w.maxStale <= maxStale, `${this.what}: up to ${w.maxStale} timers of exited threads at once (at most ${maxStale})`)
    this.c.ok(w.wallTimers === 0, `${this.what}: ${w.wallTimers} POSIX timers during a wall-mode session`)
    return w
  }

  /** For c.info: sessions per mode, the late-signal watch, the CPU account. */
  describe() {
    return { sessions: this.sessionsByMode, quietAfterStop: this.quiet, cpuMode: summary([...this.cpuTotal.values()]), timers: this.timerWatch, raced: this.raced }
  }
}

module.exports = { Sampling, ms, quietAfterStop, checkQuiet, spinMs }
