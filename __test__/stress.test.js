'use strict'
// The reliability suite's CI size: `node stress/run.js --quick`
// runs every scenario (allocation storm, thread churn, start/stop churn,
// signals and syscalls, coexistence, lifecycle, a real npm test suite,
// bad input to the API and the CLI, walker fuzzing) in child processes
// under a watchdog. Crashes, hangs and wrong results must all be 0. The
// full run is `npm run stress`; see stress/SAFETY.md.

const { spawnSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

const ROOT = path.join(__dirname, '..')

test('stress --quick: no crash, no hang, no wrong result', () => {
  const json = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-stress-test-')), 'quick.json')
  const r = spawnSync(process.execPath, [path.join(ROOT, 'stress', 'run.js'), '--quick', '--json', json], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 20 * 60 * 1000,
    maxBuffer: 64 << 20,
  })
  const table = `${r.stdout}\n${r.stderr}`
  expect(fs.existsSync(json)).toBe(true)
  const report = JSON.parse(fs.readFileSync(json, 'utf8'))
  fs.rmSync(path.dirname(json), { recursive: true, force: true })
  const failed = report.scenarios.filter((s) => s.status !== 'ok').map((s) => ({ name: s.name, status: s.status, wrong: s.wrongResults, hangs: s.hangReports, crash: s.crash }))
  expect({ failed, totals: { crashes: report.totals.crashes, hangs: report.totals.hangs, wrong: report.totals.wrong } }).toEqual({
    failed: [],
    totals: { crashes: 0, hangs: 0, wrong: 0 },
  })
  expect(report.totals.scenarios).toBeGreaterThanOrEqual(11)
  expect(report.totals.samples).toBeGreaterThan(100000)
  expect(r.status).toBe(0)
  // The table is in the log for whoever reads CI output.
  process.stdout.write(table)
}, 20 * 60 * 1000)
