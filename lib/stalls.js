'use strict'
// watchStalls(options): the addon's watcher (src/bindings/stalls.rs), and
// the one thing only JavaScript can do for it: when the process exits
// during a stall, the loop will never turn again, so the stall (cut at
// exit) and any not yet handed over go to onStall from the 'exit' event.

const fs = require('fs')
const { watchStallsNative, arity } = require('./addon.js')

function watchStalls(options) {
  const onStall = options !== null && typeof options === 'object' ? options.onStall : undefined
  // An exception thrown by onStall surfaces as any callback's does (an
  // uncaught exception, with its stack), not as N-API's warning that drops it.
  const surfaced = (stall) => {
    try {
      onStall(stall)
    } catch (e) {
      process.nextTick(() => {
        throw e
      })
    }
  }
  // The addon checks every option (EINVAL, with the range) before anything starts.
  const watcher = watchStallsNative(typeof onStall === 'function' ? { ...options, onStall: surfaced } : options)
  let open = true
  const atExit = () => {
    if (!open) return
    open = false
    try {
      for (const stall of watcher._flush()) onStall(stall)
    } catch (e) {
      // An exception in 'exit' would change the exit code; say it instead.
      try {
        fs.writeSync(2, `machsampler: onStall threw at exit: ${(e && e.stack) || e}\n`)
      } catch {}
    }
    watcher.close()
  }
  process.on('exit', atExit)
  return Object.freeze({
    /** Stops watching; a stall not yet handed to onStall is dropped. */
    close: arity('close', () => {
      if (!open) return
      open = false
      process.removeListener('exit', atExit)
      watcher.close()
    }, 0),
    /** Counters of this watcher and of the history the watchers share. */
    stats: arity('stats', () => watcher.stats(), 0),
  })
}

module.exports = { watchStalls }
