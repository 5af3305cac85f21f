'use strict'
// Reproducer: `record --duration` did nothing while the main thread was
// busy. It used a JavaScript timer, which cannot fire while the main
// thread runs: `--duration 1` on a 3 s busy program gave a 3 s profile.
// Now the sampler thread ends sampling on time, and the profile is
// written when the program ends.
//
//   node stress/repro/record-duration-busy.js   exit 1 if reproduced

const fs = require('fs')
const os = require('os')
const path = require('path')
const { ROOT, verdict, spawnSync } = require('./lib')

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-duration-'))
try {
  const prog = path.join(dir, 'busy.js')
  fs.writeFileSync(prog, 'const end = Date.now() + 3000; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)\n')
  const out = path.join(dir, 'p.machprof')
  const r = spawnSync(process.execPath, [path.join(ROOT, 'bin', 'machsampler.js'), 'record', '-q', '--duration', '1', '-o', out, '--', process.execPath, prog], { encoding: 'utf8' })
  const ms = require(ROOT)
  const p = ms.loadProfile(out)
  const seconds = Number(p.endTimeNs - p.startTimeNs) / 1e9
  const last = Math.max(...Array.from(p.samples.timeNs, (t) => Number(t - p.startTimeNs) / 1e9))
  verdict(r.status !== 0 || seconds > 1.3 || last > 1.3, `status ${r.status}; profile ${seconds.toFixed(2)} s long, last sample at ${last.toFixed(2)} s, with --duration 1 on a 3 s busy program`)
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
