'use strict'

// The public entry point. `binding.js` is the loader napi-rs generates (it
// finds the prebuilt addon for this platform); this file adds what is
// easier in JavaScript: argument-count checks, so that a stray extra
// argument is an error rather than silently ignored.

const binding = require('./binding.js')

function codedError(code, message) {
  const err = new Error(message)
  err.code = code
  return err
}

function arity(name, fn, max) {
  const wrapped = function (...args) {
    if (args.length > max) {
      const takes = max === 0 ? 'no arguments' : `at most ${max} argument${max === 1 ? '' : 's'}`
      throw codedError('EINVAL', `${name}() takes ${takes}, got ${args.length}`)
    }
    return fn(...args)
  }
  Object.defineProperty(wrapped, 'name', { value: name })
  return wrapped
}

module.exports = {
  start: arity('start', binding.start, 1),
  stop: arity('stop', binding.stop, 0),
  stats: arity('stats', binding.stats, 0),
  isRunning: arity('isRunning', binding.isRunning, 0),
  threadCount: arity('threadCount', binding.threadCount, 0),
  setNativeUnwinding: arity('setNativeUnwinding', binding.setNativeUnwinding, 1),
  getNativeUnwinding: arity('getNativeUnwinding', binding.getNativeUnwinding, 0),
  symbolicate: arity('symbolicate', binding.symbolicate, 1),
  exportProfile: arity('exportProfile', binding.exportProfile, 3),
  saveProfile: arity('saveProfile', binding.saveProfile, 3),
  loadProfile: arity('loadProfile', binding.loadProfile, 1),
  formatFromPath: arity('formatFromPath', binding.formatFromPath, 1),
  parseFormatName: arity('parseFormatName', binding.parseFormatName, 1),
  profileReport: arity('profileReport', binding.profileReport, 2),
}

// Sugar over start/stop, mirroring the seed's decorator and context
// manager (lib/sugar.js).
const sugar = require('./lib/sugar.js')
module.exports.withProfiler = arity('withProfiler', sugar.withProfiler, 2)
module.exports.profile = arity('profile', sugar.profile, 2)
