'use strict'
// Reproducer: in CPU mode, a busy thread gets far fewer samples than its
// CPU time / interval, at times none for a whole session.
//
// Seen with two copies of the addon, one in CPU mode, the other in wall
// mode at 1 kHz, and three busy threads on two cores (coexistence, two
// copies, cpu/wall): 0-60 % of the samples due, in about one session in
// four. The kernel checks a thread's CPU-time timers only at a scheduler
// tick that interrupts that thread. The wall-mode copy's sampler thread
// (real-time priority) wakes every millisecond, and each wake-up hands the
// CPU to the other busy thread sharing it: the two alternate in 1 ms time
// slices, and one of them is never running when the 4 ms tick comes. Its
// timer stays expired, unfired, while it runs (perf trace: 260 ms of its
// CPU time without a timer signal generated).
// Fixed: the sampler reads the CPU clock of threads whose timers are due,
// and fires a timer whose thread ran 20 ms past its expiry; the overrun
// of that signal counts every interval missed.
//
//   node stress/repro/starved-cpu-timers.js [sessions]   exit 1 if reproduced

const fs = require('fs')
const os = require('os')
const path = require('path')
const { verdict, ROOT, spawnSync } = require('./lib')

const sessions = Number(process.argv[2] || 12)

// A second copy of the loadable package, from another path.
const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-copy-'))
const addon = fs.readdirSync(ROOT).find((f) => f.startsWith(`machsampler.${process.platform}-${process.arch}`) && f.endsWith('.node'))
for (const f of [addon, 'binding.js', 'index.js', 'package.json']) fs.copyFileSync(path.join(ROOT, f), path.join(copy, f))
fs.cpSync(path.join(ROOT, 'lib'), path.join(copy, 'lib'), { recursive: true })

const PROGRAM = `
const fs = require('fs')
const a = require(${JSON.stringify(ROOT)}), b = require(${JSON.stringify(copy)})
const { Worker } = require('worker_threads')
const ws = [0, 1].map(() => new Worker('let x = 0; for (;;) x += Math.sqrt(x + 1)', { eval: true }))
const spin = (ms) => { const e = Date.now() + ms; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1) }
const cpuMs = (tid) => { try { return +fs.readFileSync('/proc/self/task/' + tid + '/schedstat', 'utf8').split(' ')[0] / 1e6 } catch { return NaN } }
setTimeout(() => {
  const out = []
  for (let i = 0; i < ${sessions}; i++) {
    const tids = fs.readdirSync('/proc/self/task').map(Number)
    a.start({ intervalMs: 1, mode: 'cpu' }); b.start({ intervalMs: 1, mode: 'wall' })
    const c0 = tids.map(cpuMs)
    spin(500)
    const c1 = tids.map(cpuMs)
    const p = a.stop(); b.stop()
    const weight = new Map()
    for (let k = 0; k < p.samples.thread.length; k++) {
      const tid = p.threads[p.samples.thread[k]].tid
      weight.set(tid, (weight.get(tid) || 0) + p.samples.weight[k])
    }
    const busy = tids.map((tid, k) => ({ tid, cpuMs: Math.round(c1[k] - c0[k]), samples: weight.get(tid) || 0 })).filter((t) => t.cpuMs >= 100)
    out.push({ starved: p.stats.starvedTimers, busy })
  }
  console.log(JSON.stringify(out))
  process.exit(0)
}, 300)
`

const r = spawnSync(process.execPath, ['-e', PROGRAM], { encoding: 'utf8', timeout: 120000 })
fs.rmSync(copy, { recursive: true, force: true })
let out = null
try {
  out = JSON.parse(r.stdout.trim().split('\n').pop())
} catch {}
if (!out || out.length !== sessions) verdict(true, `the program failed: status ${r.status} signal ${r.signal} ${r.stderr.slice(-300)}`)
else {
  // A thread's samples may fall short of its CPU time / interval by the
  // 20 ms limit, a refresh period and the session's end: 0.75 of them, less 5.
  const short = out.flatMap((s, i) => s.busy.filter((t) => t.samples < 0.75 * t.cpuMs - 5).map((t) => `session ${i}: ${t.samples} samples for ${t.cpuMs} ms of CPU`))
  const threads = out.reduce((n, s) => n + s.busy.length, 0)
  const fired = out.reduce((n, s) => n + s.starved, 0)
  verdict(short.length > 0, `${short.length} of ${threads} busy threads short of samples in ${sessions} sessions${short.length ? ` (${short.slice(0, 4).join('; ')})` : ''}; timers fired by the sampler: ${fired}`)
}
