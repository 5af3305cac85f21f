'use strict'
// The stall watcher on for a whole scenario (`stalls: true` in its
// options), checked against the scenario's own measure of its loop: a
// timer every 10 ms whose gaps show when the loop did not turn. Every
// stall the watcher reports must be one of those gaps (no false stalls),
// and the history it keeps must not grow once its window is full.

const ms = require('../..')

const TICK_MS = 10

class StallWatch {
  constructor(c, { thresholdMs = 300, keepMs = 2000 } = {}) {
    this.c = c
    this.thresholdMs = thresholdMs
    this.keepMs = keepMs
    this.reported = []
    /** Gaps of the 10 ms timer longer than the threshold less a tick: [start, end] ms. */
    this.gaps = []
    this.bytes = []
    this.started = Date.now()
    this.watcher = ms.watchStalls({
      thresholdMs,
      keepMs,
      intervalMs: 10,
      onStall: (s) => this.reported.push({ startMs: Number(s.startTimeNs) / 1e6, durationMs: s.durationMs }),
    })
    let last = performance.now()
    this.timer = setInterval(() => {
      const now = performance.now()
      if (now - last >= thresholdMs - TICK_MS) this.gaps.push([last, now])
      last = now
      if (this.bytes.length === 0 || now - this.bytes[this.bytes.length - 1].t >= 1000) {
        this.bytes.push({ t: now, bytes: this.watcher.stats().historyBytes })
      }
    }, TICK_MS)
  }

  stop() {
    clearInterval(this.timer)
    const stats = this.watcher.stats()
    this.watcher.close()
    const c = this.c
    // The watcher's clock is the process's monotonic clock (process.hrtime's);
    // performance.now() is the same clock from another origin.
    const hrOrigin = Number(process.hrtime.bigint()) / 1e6 - performance.now()
    for (const s of this.reported) {
      const start = s.startMs - hrOrigin
      const seen = this.gaps.some(([a, b]) => start >= a - 50 && start <= b && b - a >= s.durationMs - 2 * TICK_MS - 50)
      c.ok(seen, `a stall of ${s.durationMs.toFixed(0)} ms was reported that the loop's own timer did not see (gaps: ${JSON.stringify(this.gaps.map(([a, b]) => Math.round(b - a)))})`)
    }
    // Memory: flat once the window is full (the samples after 2 windows
    // against the largest after that, with room for one chunk and a burst).
    const full = this.bytes.filter((x) => x.t - this.bytes[0].t >= 2 * this.keepMs)
    if (full.length >= 3) {
      const first = full[0].bytes
      const peak = Math.max(...full.map((x) => x.bytes))
      c.ok(peak <= Math.max(2 * first, first + (4 << 20)), `stall history grew from ${first} to ${peak} bytes`)
    }
    c.info.stalls = { reported: this.reported.length, loopGaps: this.gaps.length, historyBytes: stats.historyBytes, historyTruncated: stats.historyTruncated }
  }
}

module.exports = { StallWatch }
