#!/usr/bin/env node
'use strict'
// npm run bench [-- --quick] [-- --only <section,...>]
//
// Measures machsampler next to perf, V8's profiler (--cpu-prof) and
// @datadog/pprof, writes every figure to bench/results/latest.json
// (quick.json with --quick) and prints one table: metric | measured |
// target | met. Each section (bench/sections/*.js) is { name, run(ctx),
// rows(result) }. The machines are shared and noisy, so every comparison
// is a ratio taken in the same run, configurations interleaved round by
// round, reported as the median with its spread [min..max].

const fs = require('fs')
const os = require('os')
const path = require('path')
const { ROOT, tool, perfWorks } = require('./lib/proc')
const { render } = require('./lib/table')
const { normalizeName } = require('./lib/names')

const SECTIONS = [
  require('./sections/overhead'),
  require('./sections/overhead-ab'),
  require('./sections/handler'),
  require('./sections/rate'),
  require('./sections/sampler-cpu'),
  require('./sections/startup'),
  require('./sections/worker-startup'),
  require('./sections/unwind'),
  require('./sections/fidelity'),
  require('./sections/memory'),
  require('./sections/js-names'),
  require('./sections/inline-agreement'),
  require('./sections/stalls'),
]

const CONFIG = {
  quick: { rounds: 2, overheadRounds: 3, seconds: 1.5, rateSeconds: 2, abCycles: 3 },
  full: { rounds: 5, overheadRounds: 9, seconds: 4, rateSeconds: 10, abCycles: 15 },
}

function parseArgs(argv) {
  const out = { quick: false, only: [] }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--quick') out.quick = true
    else if (a === '--only') out.only.push(...(argv[++i] || '').split(','))
    else if (a.startsWith('--only=')) out.only.push(...a.slice(7).split(','))
    else throw new Error(`unknown argument ${a}; usage: node bench/run.js [--quick] [--only <section,...>] (sections: ${SECTIONS.map((s) => s.name).join(', ')})`)
  }
  out.only = out.only.filter(Boolean)
  const known = new Set(SECTIONS.map((s) => s.name))
  const unknown = out.only.filter((n) => !known.has(n))
  if (unknown.length) throw new Error(`unknown section ${unknown.join(', ')}; sections: ${[...known].join(', ')}`)
  return out
}

/** The table of a results file: every section's rows, in the order they ran. */
function table(results) {
  const rows = []
  for (const s of SECTIONS) {
    if (results.errors?.[s.name]) rows.push([`${s.name}: failed`, results.errors[s.name].split('\n')[0].slice(0, 200), '', 'NOT MEASURED'])
    const r = results.sections?.[s.name]
    if (r) rows.push(...s.rows(r))
  }
  return render(rows)
}

async function main() {
  const args = parseArgs(process.argv.slice(2))
  const t0 = Date.now()
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-bench-'))
  const log = (...m) => process.stderr.write(m.join(' ') + '\n')
  const perfOk = perfWorks(tmp)
  const cfg = args.quick ? CONFIG.quick : CONFIG.full
  const ctx = { tmp, quick: args.quick, cfg, perfOk, log }
  const results = {
    version: 2,
    quick: args.quick,
    date: new Date().toISOString(),
    commit: tool('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD']),
    machine: {
      hostname: os.hostname(),
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      memGiB: +(os.totalmem() / 2 ** 30).toFixed(1),
      kernel: os.release(),
      platform: `${process.platform}-${process.arch}`,
      loadAvg: os.loadavg(),
    },
    versions: {
      node: process.version,
      machsampler: require(path.join(ROOT, 'package.json')).version,
      perf: tool('perf', ['--version']),
      perfUsable: perfOk,
    },
    config: cfg,
    sections: {},
    errors: {},
  }
  for (const s of SECTIONS) {
    if (args.only.length && !args.only.includes(s.name)) continue
    const s0 = Date.now()
    log(`== ${s.name}`)
    try {
      results.sections[s.name] = await s.run(ctx)
    } catch (e) {
      results.errors[s.name] = e.stack || String(e)
      log(`${s.name} failed: ${e.stack || e}`)
    }
    log(`== ${s.name}: ${((Date.now() - s0) / 1000).toFixed(0)} s`)
  }
  results.elapsedSeconds = (Date.now() - t0) / 1000
  const dir = path.join(__dirname, 'results')
  fs.mkdirSync(dir, { recursive: true })
  const file = path.join(dir, args.quick ? 'quick.json' : 'latest.json')
  const saved = args.only.length ? mergeInto(file, results) : results
  fs.writeFileSync(file + '.tmp', JSON.stringify(saved, null, 2) + '\n')
  fs.renameSync(file + '.tmp', file)
  fs.rmSync(tmp, { recursive: true, force: true })
  console.log(table(results))
  console.log(`\nresults: ${path.relative(process.cwd(), file)} (${results.elapsedSeconds.toFixed(0)} s)`)
  if (Object.keys(results.errors).length) process.exitCode = 1
}

/**
 * An `--only` run replaces its sections in the results file and leaves the
 * others, noting when and on which commit each was re-run (`rerun`), so a
 * section re-run after a full run does not discard the full run.
 */
function mergeInto(file, results) {
  let base
  try {
    base = JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch {
    return results
  }
  if (base.quick !== results.quick) return results
  base.rerun = base.rerun || {}
  for (const name of Object.keys(results.sections).concat(Object.keys(results.errors))) {
    base.sections[name] = results.sections[name]
    if (results.errors[name]) base.errors[name] = results.errors[name]
    else delete base.errors[name]
    base.rerun[name] = { date: results.date, commit: results.commit, node: results.versions.node }
  }
  return base
}

module.exports = { normalizeName, table, SECTIONS }

if (require.main === module) {
  main().catch((e) => {
    console.error(e.stack || String(e))
    process.exit(1)
  })
}
