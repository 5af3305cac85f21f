'use strict'
// The sampler as the scenarios drive it: on at 1 kHz for the whole
// scenario, optionally stopped and restarted every `churnMs` (start/stop
// churn on top of the scenario's own load). Every profile is checked.

const ms = require('../..')

class Sampling {
  constructor(c, { intervalMs = 1, churnMs = 0, what = 'sampler', onProfile = null } = {}) {
    this.c = c
    this.onProfile = onProfile
    /** Non-idle samples per tid, over every session. */
    this.busyByTid = new Map()
    this.options = { intervalMs }
    this.what = what
    this.sessions = 0
    this.timer = null
    ms.start(this.options)
    if (churnMs > 0) {
      this.timer = setInterval(() => this.restart(), churnMs)
    }
  }

  /**
   * Stops, checks the profile, starts again. Another thread may have
   * stopped or started the sampler in between (the sampler is
   * process-wide): ESRCH and EAGAIN are the documented answers then.
   */
  restart() {
    this.raced = this.raced || 0
    try {
      this.collect(ms.stop())
    } catch (e) {
      if (!this.c.ok(e.code === 'ESRCH', `stop() threw ${e.code}: ${e.message}`)) return
      this.raced++
    }
    try {
      ms.start(this.options)
    } catch (e) {
      if (!this.c.ok(e.code === 'EAGAIN', `start() threw ${e.code}: ${e.message}`)) return
      this.raced++
    }
  }

  collect(p) {
    this.sessions++
    this.c.profile(p, `${this.what} session ${this.sessions}`)
    for (let i = 0; i < p.samples.thread.length; i++) {
      if (p.samples.idle[i]) continue
      const tid = p.threads[p.samples.thread[i]].tid
      this.busyByTid.set(tid, (this.busyByTid.get(tid) || 0) + 1)
    }
    if (this.onProfile) this.onProfile(p)
    this.last = p
    return p
  }

  /** Stops for good; returns the last profile. */
  stop() {
    if (this.timer) clearInterval(this.timer)
    if (!ms.isRunning()) ms.start(this.options) // a worker stopped it last
    return this.collect(ms.stop())
  }
}

module.exports = { Sampling, ms }
