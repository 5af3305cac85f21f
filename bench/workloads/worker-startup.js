'use strict'
// CPU added per worker created while sampling: creates `workers` workers
// one after another (each runs a little JavaScript and exits) and prints
// the process's CPU time. argv[2]: JSON { mode: 'off' | 'nojs' | 'js',
// workers }. The bench takes the per-worker difference between modes in
// the same run.
const { Worker } = require('worker_threads')

const BODY = `
function startupWork(n) { return n < 2 ? n : startupWork(n - 1) + startupWork(n - 2) }
let x = 0
for (let i = 0; i < 20; i++) x += startupWork(18)
require('worker_threads').parentPort.postMessage(x)
`

async function main() {
  const opts = JSON.parse(process.argv[2] || '{}')
  const n = opts.workers || 20
  const ms = opts.mode === 'off' ? null : require('../..')
  if (ms) ms.start({ intervalMs: 1, jsNames: opts.mode === 'js' })
  // One worker first, so the process's own one-time costs (the first
  // registration, the discovery thread) are not counted per worker.
  const one = async () => {
    // Only 'exit': a message posted just before exiting may arrive after it.
    const w = new Worker(BODY, { eval: true })
    await new Promise((r) => w.once('exit', r))
  }
  await one()
  const c0 = process.cpuUsage()
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) await one()
  const c = process.cpuUsage(c0)
  const wallNs = Number(process.hrtime.bigint() - t0)
  const v8 = opts.mode === 'js' ? JSON.parse(require('../../binding.js').__v8Stats()) : null
  if (ms) ms.stop()
  process.stdout.write(JSON.stringify({ mode: opts.mode, workers: n, cpuUs: c.user + c.system, wallNs, v8 }) + '\n')
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
