'use strict'
// Reproducer: when a library took the sampling signal over after start(),
// stop() returned no samples and said nothing. Now stats.signalTakenOver
// is set and stop() warns.
//
//   node stress/repro/signal-taken-over.js   exit 1 if reproduced

const { verdict, addonScript, spawnSync } = require('./lib')

// Another copy of a handler for every signal the addon may use, installed
// after start(): libuv's, through process.on for SIGURG, and a real-time
// one through a second signal API is not reachable from JS, so SIGURG is
// what this takes over (the addon uses it when free).
const PROGRAM = addonScript(`ms.start({ intervalMs: 1 })
const spin = (t) => { const end = Date.now() + t; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1) }
spin(200)
process.on('SIGURG', () => {})
spin(1500)
const p = ms.stop()
console.log(JSON.stringify({ takenOver: p.stats.signalTakenOver }))`)

const r = spawnSync(process.execPath, ['-e', PROGRAM], { encoding: 'utf8' })
let o = {}
try {
  o = JSON.parse(r.stdout)
} catch {}
const warned = /MACHSAMPLER_SIGNAL_TAKEN/.test(r.stderr)
verdict(r.status !== 0 || o.takenOver !== 1 || !warned, `status ${r.status}; stats.signalTakenOver ${o.takenOver}; warning ${warned ? 'given' : 'missing'}`)
