'use strict'
// Workers created after the addon loads get it preloaded, so their isolates
// register and their JavaScript frames are named too; their execArgv is
// otherwise the same (the parent's, or what the caller passed). Node refuses
// some flags in an explicit execArgv that it would inherit silently (V8
// options such as --perf-basic-prof); such a worker is created exactly as
// asked, without the preload. Opt out with MACHSAMPLER_NO_WORKER_HOOK=1.

const path = require('path')

const HOOKED = Symbol.for('machsampler.workerHook')
const PRELOAD = path.join(__dirname, 'worker-register.js')

function hookWorkers() {
  if (process.env.MACHSAMPLER_NO_WORKER_HOOK === '1') return
  const wt = require('worker_threads')
  if (wt.Worker[HOOKED]) return
  const Original = wt.Worker
  function Worker(filename, options) {
    if (!new.target) return Reflect.apply(Original, this, [filename, options])
    const opts = options && typeof options === 'object' ? options : {}
    const execArgv = Array.isArray(opts.execArgv) ? opts.execArgv : process.execArgv
    try {
      return Reflect.construct(Original, [filename, { ...opts, execArgv: [...execArgv, '--require', PRELOAD] }], new.target)
    } catch (e) {
      if (e && e.code === 'ERR_WORKER_INVALID_EXEC_ARGV') return Reflect.construct(Original, [filename, options], new.target)
      throw e
    }
  }
  Object.setPrototypeOf(Worker, Original)
  Worker.prototype = Original.prototype
  Object.defineProperty(Worker, 'name', { value: 'Worker' })
  Object.defineProperty(Worker, HOOKED, { value: true })
  wt.Worker = Worker
  // So that `import { Worker } from 'node:worker_threads'` sees it too.
  require('module').syncBuiltinESMExports()
}

module.exports = { hookWorkers }
