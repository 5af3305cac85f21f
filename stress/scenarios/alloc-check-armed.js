'use strict'
// The allocation detector is what makes alloc-storm meaningful: with
// MACHSAMPLER_ALLOC_CHECK=1 the addon aborts if its signal handler
// allocates. Prove it is armed: with fault injection (the handler
// allocates on purpose) the process must die of SIGABRT with the
// detector's message; without it, the same program exits 0.

const { main } = require('../lib/child')
const { runNode, describe, ADDON } = require('../lib/proc')

const PROGRAM = `
const ms = require(${JSON.stringify(ADDON)})
ms.start({ intervalMs: 1 })
const end = Date.now() + 1500
let x = 0
while (Date.now() < end) x += JSON.stringify({ a: Buffer.alloc(512).length }).length
const p = ms.stop()
console.log('samples', p.samples.thread.length)
`

main(async (o, c) => {
  const injected = await runNode(PROGRAM, {
    env: { MACHSAMPLER_ALLOC_CHECK: '1', MACHSAMPLER_FAULT_INJECTION: 'alloc-in-window' },
    timeoutMs: 20000,
  })
  c.ok(!injected.timedOut, `fault injection: hung (${describe(injected)})`)
  c.eq(injected.signal, 'SIGABRT', `fault injection: the detector must abort (${describe(injected)})`)
  c.ok(/heap allocation while a sampled thread is stopped/.test(injected.stderr), `fault injection: the detector's message is missing (${describe(injected)})`)

  const clean = await runNode(PROGRAM, { env: { MACHSAMPLER_ALLOC_CHECK: '1' }, timeoutMs: 20000 })
  c.eq([clean.code, clean.signal], [0, null], `check on, no injection: must exit 0 (${describe(clean)})`)
  const m = /samples (\d+)/.exec(clean.stdout)
  c.ok(m && Number(m[1]) > 100, `check on, no injection: too few samples: ${clean.stdout.trim()}`)
  if (m) c.samples += Number(m[1])
})
