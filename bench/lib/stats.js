'use strict'
// Summaries of repeated measurements. Every comparison in the bench is a
// ratio taken within one round, so these only summarize rounds.

function median(xs) {
  const s = [...xs].filter((x) => x != null && !Number.isNaN(x)).sort((a, b) => a - b)
  if (!s.length) return null
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

/** { min, max, n }: the spread printed next to every median. */
function spread(xs) {
  const s = xs.filter((x) => x != null && !Number.isNaN(x))
  return s.length ? { min: Math.min(...s), max: Math.max(...s), n: s.length } : null
}

function percentile(sorted, q) {
  if (!sorted.length) return null
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
}

/** L1 distance of two share maps (name -> share). */
function l1(a, b) {
  let d = 0
  for (const k of new Set([...a.keys(), ...b.keys()])) d += Math.abs((a.get(k) || 0) - (b.get(k) || 0))
  return d
}

/** counts (name -> n) to shares (name -> n / total). */
function shares(counts) {
  let total = 0
  for (const v of counts.values()) total += v
  return new Map([...counts].map(([k, v]) => [k, total ? v / total : 0]))
}

module.exports = { median, spread, percentile, l1, shares }
