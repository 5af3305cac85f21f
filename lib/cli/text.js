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

function clip(s, max = NAME_MAX) {
  return s.length > max ? s.slice(0, max - 1) + '…' : s
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

function scope(report, thread) {
  const what = report.idleLeftOut > 0 ? 'idle samples left out' : 'all samples'
  const threads = thread === undefined ? 'all threads' : `thread ${thread}`
  return `${threads}; ${what}; 1 sample = ${ms(report.intervalNs)}`
}

/** The hot-functions table, sorted as the report was. */
function functionsTable(report, by, thread) {
  const lines = []
  const title = by === 'total' ? 'total' : 'self'
  lines.push(`Top ${report.functions.length} functions by ${title} samples (${scope(report, thread)}):`)
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
  const lines = [`Top ${report.paths.length} call paths (leaf first):`]
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

function threadsTable(report) {
  const lines = ['Threads (busiest first):', `  ${pad('tid', 8)} ${pad('samples', 9)} ${pad('idle', 9)}  name`]
  for (const t of report.threads) {
    const name = (t.name || 'thread') + (t.isMain ? ' (main)' : '')
    lines.push(`  ${pad(t.tid, 8)} ${pad(int(t.samples), 9)} ${pad(int(t.idle), 9)}  ${name}`)
  }
  return lines
}

/** The header lines, from a profile summary: duration, samples, threads, drops. */
function overview(summary) {
  const s = summary.stats
  return [
    `  duration  ${ms(summary.durationNs)}, sampling every ${ms(summary.intervalNs)}`,
    `  samples   ${int(summary.samples)} (${int(summary.idleSamples)} idle), ${int(s.samplesDropped)} dropped` +
      (s.ticksMissed ? `, ${int(s.ticksMissed)} ticks missed` : ''),
    `  threads   ${int(summary.threadsSampled)} sampled of ${int(summary.threadsSeen)} seen`,
  ]
}

module.exports = { overview, functionsTable, pathsTable, threadsTable, int, ms }
