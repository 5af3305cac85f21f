'use strict'
// Samples per thread against each thread's CPU time. The main thread and
// `busy` workers spin; each thread's CPU time over the session is read
// from /proc before start() and after stop(). argv[2]: JSON
// { intervalMs, seconds, busy, mode }.
const fs = require('fs')
const { Worker } = require('worker_threads')
const ms = require('../..')

const o = JSON.parse(process.argv[2] || '{}')
const cpuNs = (tid) => Number(fs.readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ')[0])
const stop = new Int32Array(new SharedArrayBuffer(4))
const BODY = `const { workerData, parentPort } = require('worker_threads')
parentPort.postMessage(Number(require('fs').readlinkSync('/proc/thread-self').split('/').pop()))
const a = new Int32Array(workerData); let x = 0
while (Atomics.load(a, 0) === 0) x += Math.sqrt(x + 1)`
const workers = Array.from({ length: o.busy ?? 2 }, () => new Worker(BODY, { eval: true, workerData: stop.buffer }))
Promise.all(workers.map((w) => new Promise((r) => w.once('message', r)))).then((tids) => {
  const main = process.pid
  const all = [main, ...tids]
  const before = all.map(cpuNs)
  const wall0 = process.hrtime.bigint()
  ms.start({ intervalMs: o.intervalMs, mode: o.mode || 'cpu' })
  const end = Date.now() + o.seconds * 1000
  let x = 0
  if (o.mainBusy !== false) while (Date.now() < end) x += Math.sqrt(x + 1)
  else Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, o.seconds * 1000)
  const p = ms.stop()
  const after = all.map(cpuNs)
  const wallNs = Number(process.hrtime.bigint() - wall0)
  Atomics.store(stop, 0, 1)
  const perTid = new Map()
  for (let i = 0; i < p.samples.thread.length; i++) {
    const tid = p.threads[p.samples.thread[i]].tid
    const e = perTid.get(tid) || { samples: 0, idle: 0 }
    e.samples += p.samples.weight[i]
    if (p.samples.idle[i]) e.idle += p.samples.weight[i]
    perTid.set(tid, e)
  }
  const threads = all.map((tid, i) => ({ tid, main: tid === main, cpuNs: after[i] - before[i], ...(perTid.get(tid) || { samples: 0, idle: 0 }) }))
  console.log(JSON.stringify({ intervalNs: Number(p.intervalNs), wallNs, ticks: p.stats.ticks, ticksMissed: p.stats.ticksMissed, samplerCpuNs: p.stats.samplerCpuNs, threads }))
  process.exit(0)
})
