'use strict'
// The child side of the stress protocol. A scenario is a script that
// `stress/run.js` starts in its own process (group); it talks back with
// lines on stdout that start with "@@stress ":
//   {type: 'progress', n, note}  work advanced: resets the 5 s watchdog
//   {type: 'wrong', msg}         one wrong result (also kept in the result)
//   {type: 'hang', what}         the scenario saw one of its own threads or
//                                grandchildren stall: counted as a hang
//   {type: 'result', ...}        the summary; the scenario then exits 0
// Everything is written with fs.writeSync, so a line is out before a crash,
// process.exit() or abort that follows it.

const fs = require('fs')
const path = require('path')

const ROOT = path.join(__dirname, '..', '..')

/**
 * Sampler bugs this suite found and reproduced, not fixed yet. A check
 * they break is counted in the table's "known" column and does not fail
 * the run (unless --strict), so that CI stays useful until the fix lands;
 * remove an entry when its reproducer passes.
 */
const KNOWN_BUGS = {
  'report-header-rows':
    "the report's summary (ProfileSummary.samples / idleSamples, the 'samples' line of `machsampler report`) counts rows, not samples by weight, while its tables count by weight",
  // Fixed, kept here as examples of the format:
  // 'cpu-beside-wall-copy': a CPU-mode copy beside a wall-mode one gave a
  //   busy thread far fewer samples than its CPU time / interval, at times
  //   none: the kernel never fired its timer (coexistence, two copies);
  //   starved timers are now fired by the sampler;
  // 'signal-after-stop': a signal queued to a thread that had not run yet
  //   delivered after stop() returned (stress/repro/signal-after-stop.js);
  //   stop() now waits for signals on their way;
  // 'concurrent-start-stop': stop() racing start() on another JS thread
  //   (stress/repro/concurrent-start-stop.js), fixed in 87a9ac3;
  // 'symbolicate-fifo': symbolicate() blocking on a FIFO module path
  //   (stress/repro/symbolicate-fifo-module.js), fixed in 932c9a8.
}
const PREFIX = '@@stress '

function emit(obj) {
  const buf = Buffer.from(PREFIX + JSON.stringify(obj) + '\n')
  let off = 0
  // A non-blocking or interrupted stdout (EAGAIN, EINTR, a short write)
  // must not lose a line: retry until it is all out.
  for (let tries = 0; off < buf.length && tries < 10000; tries++) {
    try {
      off += fs.writeSync(1, buf, off, buf.length - off)
    } catch (e) {
      if (e.code !== 'EAGAIN' && e.code !== 'EINTR') return // stdout gone: the parent is gone too
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1)
    }
  }
}

let progressN = 0
let lastNote = ''
/** Tells the watchdog that work advanced. Cheap: at most one line per 100 ms. */
let lastEmit = 0
function progress(note) {
  progressN++
  if (note) lastNote = String(note)
  const now = Date.now()
  if (now - lastEmit >= 100) {
    lastEmit = now
    emit({ type: 'progress', n: progressN, note: lastNote })
  }
}

/** Collects checks, wrong results, samples and free-form info. */
class Checker {
  constructor() {
    this.checks = 0
    this.wrong = []
    this.hangs = []
    this.samples = 0
    this.info = {}
    /** Failed checks that match a known, reproduced sampler bug: bug id -> count. */
    this.known = {}
  }

  /**
   * A check that a known bug (see KNOWN_BUGS) is expected to break. It is
   * counted under that bug, not as a wrong result, unless --strict.
   */
  knownOk(bug, cond, msg) {
    this.checks++
    if (!cond) {
      if (!KNOWN_BUGS[bug]) throw new Error(`unknown bug id ${bug}`)
      const k = (this.known[bug] ||= { count: 0, example: null })
      k.count++
      k.example ||= typeof msg === 'function' ? msg() : msg
    }
    return !!cond
  }

  ok(cond, msg) {
    this.checks++
    if (!cond) {
      const m = typeof msg === 'function' ? msg() : msg
      this.wrong.push(m)
      if (this.wrong.length <= 50) emit({ type: 'wrong', msg: m })
    }
    return !!cond
  }

  eq(actual, expected, msg) {
    const a = JSON.stringify(actual)
    const e = JSON.stringify(expected)
    return this.ok(a === e, () => `${msg}: got ${trim(a)}, expected ${trim(e)}`)
  }

  hang(what) {
    this.hangs.push(what)
    emit({ type: 'hang', what })
  }

  /**
   * Adds a sampled profile's samples (weights) to the total and checks its
   * shape (structure, weights, stats that agree with the samples, and
   * with `mode` what that mode promises: see check.js).
   */
  profile(p, what, mode) {
    const { checkProfile, weightSum } = require('./check')
    const problem = checkProfile(p, { mode })
    this.ok(problem === 'ok', () => `${what}: inconsistent profile: ${problem}`)
    this.samples += weightSum(p)
    return p
  }
}

function trim(s, n = 300) {
  s = String(s)
  return s.length > n ? s.slice(0, n) + '…' : s
}

/**
 * Runs a scenario: `fn(options, checker)` with the options the parent
 * passed as JSON in argv[2]. Prints the result line and exits 0; a throw
 * is a wrong result (with its stack), not a crash.
 */
function main(fn) {
  const options = JSON.parse(process.argv[2] || '{}')
  const c = new Checker()
  const started = Date.now()
  c.ok(process.env.MACHSAMPLER_ALLOC_CHECK === '1', 'the allocation check is not armed (MACHSAMPLER_ALLOC_CHECK=1; run.js sets it)')
  Promise.resolve()
    .then(() => fn(options, c))
    .catch((e) => c.ok(false, `scenario threw: ${(e && e.stack) || e}`))
    .then(() => {
      emit({
        type: 'result',
        samples: c.samples,
        checks: c.checks,
        wrong: c.wrong.slice(0, 50),
        wrongCount: c.wrong.length,
        hangs: c.hangs,
        known: c.known,
        info: c.info,
        ms: Date.now() - started,
      })
      process.exit(0)
    })
}

module.exports = { ROOT, KNOWN_BUGS, PREFIX, emit, progress, Checker, main, trim }
