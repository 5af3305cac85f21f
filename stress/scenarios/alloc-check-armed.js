'use strict'
// The allocation detector is what makes alloc-storm meaningful: with
// MACHSAMPLER_ALLOC_CHECK=1 the addon aborts if its signal handler
// allocates. Prove it is armed in both modes (CPU mode: the thread's own
// CPU timer signals it; wall mode: the sampler thread does): with fault
// injection (the handler allocates on purpose) the process must die of
// SIGABRT with the detector's message; without it, the same program exits
// 0 with a consistent profile whose samples of the busy main thread match
// what its mode promises (CPU mode: its CPU time / interval; wall mode: a
// sample per tick at most, most of them busy).

const path = require('path')
const { main } = require('../lib/child')
const { runNode, describe, ADDON } = require('../lib/proc')

const LIB = path.join(__dirname, '..', 'lib')

const PROGRAM = (mode) => `
const ms = require(${JSON.stringify(ADDON)})
const { checkProfile } = require(${JSON.stringify(path.join(LIB, 'check.js'))})
const { cpuWindow, account } = require(${JSON.stringify(path.join(LIB, 'cpu.js'))})
const w = cpuWindow()
ms.start({ intervalMs: 1, mode: '${mode}' })
${mode === 'cpu' ? 'w.armed()' : ''}
const end = Date.now() + 1500
let x = 0
while (Date.now() < end) x += JSON.stringify({ a: Buffer.alloc(512).length }).length
const p = ms.stop()
const acc = account(p, w.end())
const main = acc.threads.find((t) => t.tid === process.pid)
console.log(JSON.stringify({ consistent: checkProfile(p, { mode: '${mode}' }), samples: p.stats.samplesCaptured, main, ticks: p.stats.ticks }))
`

main(async (o, c) => {
  c.info.modes = {}
  for (const mode of ['cpu', 'wall']) {
    const injected = await runNode(PROGRAM(mode), {
      env: { MACHSAMPLER_ALLOC_CHECK: '1', MACHSAMPLER_FAULT_INJECTION: 'alloc-in-window' },
      timeoutMs: 20000,
    })
    c.ok(!injected.timedOut, `${mode} mode, fault injection: hung (${describe(injected)})`)
    c.eq(injected.signal, 'SIGABRT', `${mode} mode, fault injection: the detector must abort (${describe(injected)})`)
    c.ok(/heap allocation while a sampled thread is stopped/.test(injected.stderr), `${mode} mode, fault injection: the detector's message is missing (${describe(injected)})`)

    const clean = await runNode(PROGRAM(mode), { env: { MACHSAMPLER_ALLOC_CHECK: '1' }, timeoutMs: 20000 })
    c.eq([clean.code, clean.signal], [0, null], `${mode} mode, check on, no injection: must exit 0 (${describe(clean)})`)
    let r = null
    try {
      r = JSON.parse(clean.stdout.trim().split('\n').pop())
    } catch {}
    if (!c.ok(r && r.main, `${mode} mode, check on, no injection: no result: ${clean.stdout.trim()}`)) continue
    c.samples += r.samples
    c.eq(r.consistent, 'ok', `${mode} mode: the profile`)
    const m = r.main
    if (mode === 'cpu') {
      // Its samples stand for its CPU time, whatever share of a core it got.
      c.ok(m.busy <= m.intervals * 1.01 + 1 && m.busy >= m.armedIntervals * 0.8 - 5, `CPU mode: the main thread has ${m.busy} samples for ${m.intervals.toFixed(0)} ms of CPU time (${m.armedIntervals.toFixed(0)} once its timer was set)`)
    } else {
      // Every tick gives it a sample, busy when it ran since the last one.
      c.ok(m.busy + m.idle <= r.ticks && m.busy + m.idle >= r.ticks * 0.8 && m.busy > 0, `wall mode: the main thread has ${m.busy} busy and ${m.idle} idle samples in ${r.ticks} ticks`)
    }
    c.info.modes[mode] = { mainSamples: m.busy, mainIdle: m.idle, mainCpuMs: +(m.cpuNs / 1e6).toFixed(0), ticks: r.ticks }
  }
})
