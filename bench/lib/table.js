'use strict'
// The printed table: one row per figure, with its target and whether the
// median met it. Noise is in the spread; a verdict on a median inside its
// own spread is shown as "within noise" by the sections that can tell.

function pct(x, digits = 2) {
  return x == null ? '-' : `${x.toFixed(digits)} %`
}

/** "1.23 % [0.40..2.10]": a median and its spread (min..max), in %. */
function pctSpread(m, s, digits = 2) {
  if (m == null) return '-'
  return s ? `${m.toFixed(digits)} % [${s.min.toFixed(1)}..${s.max.toFixed(1)}]` : `${m.toFixed(digits)} %`
}

function ns(x) {
  if (x == null) return '-'
  return x >= 1e6 ? `${(x / 1e6).toFixed(2)} ms` : x >= 1e3 ? `${(x / 1e3).toFixed(2)} µs` : `${Math.round(x)} ns`
}

function verdict(ok) {
  return ok == null ? '' : ok ? 'met' : 'NOT MET'
}

function render(rows) {
  const head = ['metric', 'measured', 'target', 'met']
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => String(row[i] ?? '').length)))
  const line = (cells) => cells.map((c, i) => String(c ?? '').padEnd(widths[i])).join(' | ').trimEnd()
  return [line(head), widths.map((w) => '-'.repeat(w)).join('-|-'), ...rows.map(line)].join('\n')
}

module.exports = { pct, pctSpread, ns, verdict, render }
