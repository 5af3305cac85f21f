'use strict'
// libuv pool: crypto.pbkdf2 (async) keeps the 4 pool threads busy for
// BENCH_SECONDS; counts completed derivations.
const crypto = require('crypto')
const { maybeStartSampler, finish } = require('./common')

const seconds = Number(process.env.BENCH_SECONDS || 3)
const ITER = 20000

function pump(deadline, state, done) {
  if (Date.now() >= deadline) {
    if (--state.inflight === 0) done()
    return
  }
  crypto.pbkdf2('password', 'salt', ITER, 32, 'sha256', () => {
    state.ops++
    pump(deadline, state, done)
  })
}

function phase(secs) {
  return new Promise((resolve) => {
    const state = { ops: 0, inflight: 8 }
    const deadline = Date.now() + secs * 1000
    for (let i = 0; i < 8; i++) pump(deadline, state, () => resolve(state.ops))
  })
}

phase(0.5).then(() => {
  const ms = maybeStartSampler()
  const t0 = Date.now()
  phase(seconds).then((ops) => finish(ms, { workload: 'pool', ops, seconds: (Date.now() - t0) / 1000, opsPerSec: ops / seconds }))
})
