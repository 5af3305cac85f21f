'use strict'
// Text for the terminal: the record summary and `machsampler report`
// (summary, hot functions, hot paths). The numbers come from the addon;
// this only lays them out.

const path = require('path')

const NAME_MAX = 110
const PATH_FRAMES = 8

const int = (n) => Math.round(n).toLocaleString('en-US')
const pct = (n, of) => (of > 0 ? ((100 * n) / of).toFixed(1) : '0.0') + '%'
const pad = (s, w) => String(s).padStart(w)

function ms(ns) {
  const v = ns / 1e6
  return v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(v < 10 ? 2 : 0)} ms`
}

/**
 * `s` safe to print on a terminal: control characters (names of threads and
 * functions may hold any byte), line and paragraph separators and
 * direction overrides are shown as escapes. Newlines are kept.
 */
function printable(s) {
  return s.replace(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g, (c) => {
    const code = c.charCodeAt(0)
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16)}`
  })
}

/** A name on one row: shortened to `max`, its line breaks shown as escapes. */
function clip(s, max = NAME_MAX) {
  const one = s.replace(/\r/g, '\\r').replace(/\n/g, '\\n')
  return one.length > max ? one.slice(0, max - 1) + '…' : one
}

/**
 * Where a function is: `file:line` for source, else its module; nothing
 * when the name says it already (JS names carry their location).
 */
function where(f) {
  if (f.file && f.name.includes(f.file)) return f.module
  if (!f.file && f.module && f.name.endsWith(` in ${f.module}`)) return ''
  if (f.file) return f.line ? `${path.basename(f.file)}:${f.line}` : path.basename(f.file)
  return f.module
}

function scope(report, thread, view) {
  const what = report.idleLeftOut > 0 ? 'idle samples left out' : 'all samples'
  const threads = thread === undefined ? 'all threads' : `thread ${thread}`
  const shown = view && view !== 'mixed' ? `; ${view} view` : ''
  return `${threads}; ${what}${shown}; 1 sample = ${ms(report.intervalNs)}`
}

/** The hot-functions table, sorted as the report was. */
function functionsTable(report, by, thread, view) {
  const lines = []
  const title = by === 'total' ? 'total' : 'self'
  const top = report.functions.length ? `Top ${report.functions.length} functions` : 'Functions'
  lines.push(`${top} by ${title} samples (${scope(report, thread, view)}):`)
  if (report.functions.length === 0) {
    lines.push('  (no samples)')
    return lines
  }
  const w = Math.max(5, int(report.samples).length)
  lines.push(`  ${pad('self', w)} ${pad('', 6)}  ${pad('total', w)} ${pad('', 6)}  function`)
  for (const f of report.functions) {
    const loc = where(f)
    lines.push(
      `  ${pad(int(f.selfSamples), w)} ${pad(pct(f.selfSamples, report.samples), 6)}  ` +
        `${pad(int(f.totalSamples), w)} ${pad(pct(f.totalSamples, report.samples), 6)}  ` +
        `${clip(f.name)}${loc ? `  [${loc}]` : ''}`,
    )
  }
  return lines
}

/** Hot paths, leaf first (the leaf is what ran; callers follow). */
function pathsTable(report) {
  const lines = [report.paths.length ? `Top ${report.paths.length} call paths (leaf first):` : 'Call paths (leaf first):']
  if (report.paths.length === 0) {
    lines.push('  (no samples)')
    return lines
  }
  const w = Math.max(5, int(report.samples).length)
  for (const p of report.paths) {
    // Recursion shows as one entry, `fib ×12`, so a deep recursive path
    // still shows where it came from.
    const runs = []
    for (const f of [...p.frames].reverse()) {
      const last = runs[runs.length - 1]
      if (last && last.name === f) last.n++
      else runs.push({ name: f, n: 1 })
    }
    const shown = runs.slice(0, PATH_FRAMES).map((r) => clip(r.name, 60) + (r.n > 1 ? ` ×${r.n}` : ''))
    if (runs.length > PATH_FRAMES) shown.push(`… ${runs.length - PATH_FRAMES} more`)
    lines.push(`  ${pad(int(p.samples), w)} ${pad(pct(p.samples, report.samples), 6)}  ${shown.join(' ← ')}`)
  }
  return lines
}

/**
 * Names an OS gives a thread that say nothing about it (roles.rs agrees).
 * Node 24 and later name threads `node-MainThread` and `WorkerThread`, and
 * a worker sampled before Node names it has its creator's name.
 */
const GENERIC = new Set(['', 'node', 'nodejs', 'electron', 'Electron', 'thread', 'MainThread', 'node-MainThread', 'WorkerThread'])

/** A thread as a person reads it: its role, and its OS name if that says more. */
function threadName(t) {
  if (!t.role) return t.name || 'thread'
  if (GENERIC.has(t.name) || t.name === t.role) return t.role
  return `${t.name} [${t.role}]`
}

/**
 * Per-thread totals, busiest first: where the time went before which
 * functions. `report --thread` takes the role, the name or the tid shown.
 */
function threadsTable(report, { max = 20 } = {}) {
  // Threads seen but never sampled (asleep the whole run) say nothing.
  const threads = report.threads.filter((t) => t.samples > 0)
  const running = threads.reduce((n, t) => n + t.samples - t.idle, 0)
  const pids = new Set(threads.map((t) => t.pid))
  const lines = [
    'Threads (busiest first; --thread takes a role, a name or a tid):',
    `  ${pad('tid', 8)} ${pad('running', 9)} ${pad('', 6)} ${pad('idle', 9)}  ${pids.size > 1 ? `${pad('pid', 7)}  ` : ''}thread`,
  ]
  for (const t of threads.slice(0, max)) {
    const busy = t.samples - t.idle
    lines.push(
      `  ${pad(t.tid, 8)} ${pad(int(busy), 9)} ${pad(pct(busy, running), 6)} ${pad(int(t.idle), 9)}  ` +
        `${pids.size > 1 ? `${pad(t.pid, 7)}  ` : ''}${threadName(t)}`,
    )
  }
  if (threads.length > max) lines.push(`  … and ${threads.length - max} more threads`)
  return lines
}

/** The files written, one line each. */
function outputLines(result) {
  return result.outputs.map((o) => `  wrote     ${o.path} (${result.format}${o.pid && result.outputs.length > 1 ? `, pid ${o.pid}` : ''})`)
}

/**
 * What the profiler itself cost: the sampler thread's CPU time, and the
 * time the sampled threads spent stopped for it (in its signal handler on
 * Linux, suspended on macOS). `inlineHint`: the profile was recorded with
 * the V8 log `record` adds, which --no-inline turns off.
 */
function costLines(summary, { inlineHint = false } = {}) {
  const s = summary.stats
  const seconds = summary.durationNs / 1e9
  const core = seconds > 0 ? ` (${((100 * s.samplerCpuNs) / summary.durationNs).toFixed(1)}% of one core)` : ''
  // Every sample taken stopped its thread, stored or dropped (a full buffer).
  const rows = s.threadsSampled || s.samplesCaptured || summary.samples
  const each = rows > 0 ? `, ${(s.totalSuspendNs / rows / 1000).toFixed(1)} µs per sample` : ''
  // V8 describing the code of each JavaScript thread for names: run on
  // those threads, once each (older profiles do not have it).
  const names = s.codeEventsCpuNs > 0 ? `; JavaScript threads ${ms(s.codeEventsCpuNs)} CPU describing their code for names` : ''
  // V8 writing its code log, which `record` turns on to split out inlined
  // functions: found in the samples, by name.
  const hint = inlineHint ? ' (--no-inline turns it off)' : ''
  const log = summary.v8LogSamples > 0 ? `; V8 writing its code log about ${ms(summary.v8LogSamples * summary.intervalNs)}${hint}` : ''
  return [
    `Profiler cost: sampler thread ${ms(s.samplerCpuNs)} CPU${core}; ` +
      `sampled threads stopped ${ms(s.totalSuspendNs)} in all${each}${names}${log}.`,
  ]
}

// What one sample's interval is, by the mode the profile was recorded in.
const TIME_OF = { cpu: ' of CPU time', wall: ' of wall-clock time' }

/** The header lines, from a profile summary: duration, samples, threads, drops. */
function overview(summary) {
  const s = summary.stats
  return [
    `  duration  ${ms(summary.durationNs)}, sampling every ${ms(summary.intervalNs)}${TIME_OF[summary.mode] || ''}`,
    `  samples   ${int(summary.samples)} (${int(summary.idleSamples)} idle), ${int(s.samplesDropped)} dropped` +
      (s.ticksMissed ? `, ${int(s.ticksMissed)} ticks missed` : ''),
    `  threads   ${int(summary.threadsSampled)} sampled of ${int(summary.threadsSeen)} seen`,
  ]
}

module.exports = { printable, clip, overview, functionsTable, pathsTable, threadsTable, threadName, outputLines, costLines, int, ms }
