'use strict'
// Reproducer: the signal handler needed about 1.5-1.8 KB of the
// interrupted thread's stack on top of the kernel's signal frame, so a
// native thread with a small stack, nearly full, ran fine without the
// sampler and died of SIGSEGV with it.
//
// Measures, for a thread with a 64 KiB stack that recurses until K KiB
// are used and spins there, the largest K that survives without the
// sampler and with it (1 ms, CPU and wall mode), to 1/8 KiB. The
// difference is what being sampled costs the thread's stack: the kernel's
// signal frame (AT_MINSIGSTKSZ, 3-4 KB with AVX-512 state) plus our
// handler. Reproduced if the handler's part exceeds 1 KiB.
//
//   node stress/repro/small-stack.js   exit 1 if reproduced

const fs = require('fs')
const { verdict, addonScript, withNativeThreads } = require('./lib')

const SAMPLED = addonScript(`for (const mode of ['cpu', 'wall']) {
  ms.start({ intervalMs: 1, mode })
  const end = Date.now() + 300; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)
  ms.stop()
}`)
const UNSAMPLED = `const end = Date.now() + 600; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)`

const survives = (program, kib) => withNativeThreads(`small=${kib}`, process.execPath, ['-e', program], { timeout: 60000 }).status === 0

/** The largest K in [lo, hi] (lo survives, hi does not) that survives, to 1/8 KiB. */
function limit(program, lo, hi) {
  while (hi - lo > 0.125) {
    const mid = (lo + hi) / 2
    if (survives(program, mid)) lo = mid
    else hi = mid
  }
  return lo
}

/** AT_MINSIGSTKSZ (51) from this process's auxiliary vector, or 0. */
function minSigStackSize() {
  try {
    const b = fs.readFileSync('/proc/self/auxv')
    for (let i = 0; i + 16 <= b.length; i += 16) if (b.readBigUInt64LE(i) === 51n) return Number(b.readBigUInt64LE(i + 8))
  } catch {}
  return 0
}

const bare = limit(UNSAMPLED, 40, 64)
const sampled = limit(SAMPLED, 40, 64)
const costBytes = Math.round((bare - sampled) * 1024)
const kernel = minSigStackSize()
const handler = costBytes - kernel
verdict(
  handler > 1024,
  `64 KiB thread stack: usable ${bare} KiB without the sampler, ${sampled} KiB sampled; being sampled needs ${costBytes} bytes of stack: the kernel's signal frame ${kernel} (AT_MINSIGSTKSZ), the handler about ${handler} (±128)`,
)
