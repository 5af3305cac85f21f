'use strict'
// Reproducer: SIGSEGV in the signal handler when a thread runs on a stack
// that is not its thread stack.
//
// The handler trusted stack bounds taken from /proc/self/maps once, and
// read at sp and fp while sp stayed inside them. Two ways to break that:
// - a native thread on a makecontext stack whose upper half becomes
//   PROT_NONE while rbp points there (native-threads.c, "fiber"): crashed
//   every run on Node 20 and 24;
// - WebAssembly JSPI (Node 24): an import wrapped in WebAssembly.Suspending,
//   called through WebAssembly.promising in a loop, 3-6 of 25 runs.
// Now a stack outside the thread's validated own stack is read with
// process_vm_readv, which cannot fault, and unwound from the copy.
//
//   node stress/repro/foreign-stacks.js [runs]   exit 1 if reproduced

const { nodes, verdict, addonScript, withNativeThreads, spawnSync } = require('./lib')

const runs = Number(process.argv[2] || 25)

const FIBER = addonScript(`ms.start({ intervalMs: 1 })
const end = Date.now() + 1500; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)
const p = ms.stop()
console.log(JSON.stringify({ samples: p.samples.thread.length, foreign: p.stats.foreignStacks }))`)

// A module importing "env.f" (a Suspending async function) and exporting
// "run", which calls it: (module (import "env" "f" (func $f (result i32)))
// (func (export "run") (result i32) call $f))
const WASM = [
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f, 0x02, 0x09, 0x01, 0x03,
  0x65, 0x6e, 0x76, 0x01, 0x66, 0x00, 0x00, 0x03, 0x02, 0x01, 0x00, 0x07, 0x07, 0x01, 0x03, 0x72, 0x75, 0x6e, 0x00,
  0x01, 0x0a, 0x06, 0x01, 0x04, 0x00, 0x10, 0x00, 0x0b,
]
const JSPI = addonScript(`
const bytes = new Uint8Array(${JSON.stringify(WASM)})
if (typeof WebAssembly.Suspending !== 'function') { console.log(JSON.stringify({ skipped: 'no JSPI' })); process.exit(0) }
const f = new WebAssembly.Suspending(async () => { let x = 0; for (let i = 0; i < 2000; i++) x += Math.sqrt(i); await null; return x | 0 })
const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { f } })
const run = WebAssembly.promising(inst.exports.run)
ms.start({ intervalMs: 1 })
;(async () => {
  const end = Date.now() + 700
  let n = 0
  while (Date.now() < end) { await run(); n++ }
  const p = ms.stop()
  console.log(JSON.stringify({ calls: n, samples: p.samples.thread.length, foreign: p.stats.foreignStacks }))
})()`)

const failures = []
let tried = 0
for (const { major, bin } of nodes([20, 24])) {
  for (let i = 0; i < runs; i++) {
    const r = withNativeThreads('fiber', bin, ['-e', FIBER])
    tried++
    if (r.status !== 0) failures.push(`Node ${major} fiber: status ${r.status} signal ${r.signal}`)
  }
  for (const flags of [[], ['--experimental-wasm-jspi']]) {
    for (let i = 0; i < runs; i++) {
      const r = spawnSync(bin, [...flags, '-e', JSPI], { encoding: 'utf8', timeout: 30000 })
      if (/skipped/.test(r.stdout) || /unknown option|bad option/i.test(r.stderr)) break
      tried++
      if (r.status !== 0) failures.push(`Node ${major} JSPI ${flags.join(' ')}: status ${r.status} signal ${r.signal}`)
    }
  }
}
verdict(failures.length > 0, `${failures.length} of ${tried} runs crashed${failures.length ? `: ${failures.slice(0, 5).join('; ')}` : ''}`)
