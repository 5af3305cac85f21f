'use strict'
// CPU added per worker created while sampling. argv[2]: JSON.
//   { mode: 'off' | 'nojs' | 'js', workers }: creates `workers` workers one
//   after another (each runs a little JavaScript and exits), in one
//   process per mode, and prints the process's CPU time. The bench takes
//   the per-worker difference between modes in the same round.
//   { mode: 'ab', pairs, workers }: the same inside one process, in blocks
//   of `workers` workers with sampling (names on) and without, alternated
//   `pairs` times (the order swapped each pair), and prints each block's
//   CPU time. start() and stop() are outside the blocks; so is one worker
//   after start(), which takes the first registration's one-time costs.
const { Worker } = require('worker_threads')

const BODY = `
function startupWork(n) { return n < 2 ? n : startupWork(n - 1) + startupWork(n - 2) }
let x = 0
for (let i = 0; i < 20; i++) x += startupWork(18)
require('worker_threads').parentPort.postMessage(x)
`

const one = async () => {
  // Only 'exit': a message posted just before exiting may arrive after it.
  const w = new Worker(BODY, { eval: true })
  await new Promise((r) => w.once('exit', r))
}

const cpuUs = (c) => c.user + c.system

async function block(n) {
  const c0 = process.cpuUsage()
  for (let i = 0; i < n; i++) await one()
  return cpuUs(process.cpuUsage(c0))
}

async function ab(opts) {
  const ms = require('../..')
  const n = opts.workers || 5
  await one()
  const on = []
  const off = []
  for (let p = 0; p < (opts.pairs || 10); p++) {
    for (const sampling of p % 2 ? [true, false] : [false, true]) {
      if (sampling) ms.start({ intervalMs: opts.intervalMs || 1, jsNames: opts.jsNames !== false })
      await one()
      const us = await block(n)
      if (sampling) ms.stop()
      ;(sampling ? on : off).push(us)
    }
  }
  process.stdout.write(JSON.stringify({ mode: 'ab', workers: n, onUs: on, offUs: off }) + '\n')
}

async function main() {
  const opts = JSON.parse(process.argv[2] || '{}')
  if (opts.mode === 'ab') return ab(opts)
  const n = opts.workers || 20
  const ms = opts.mode === 'off' ? null : require('../..')
  if (ms) ms.start({ intervalMs: 1, jsNames: opts.mode === 'js' })
  // One worker first, so the process's own one-time costs (the first
  // registration, the discovery thread) are not counted per worker.
  await one()
  const t0 = process.hrtime.bigint()
  const cpu = await block(n)
  const wallNs = Number(process.hrtime.bigint() - t0)
  const v8 = opts.mode === 'js' ? JSON.parse(require('../../binding.js').__v8Stats()) : null
  if (ms) ms.stop()
  process.stdout.write(JSON.stringify({ mode: opts.mode, workers: n, cpuUs: cpu, wallNs, v8 }) + '\n')
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
