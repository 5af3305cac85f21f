'use strict'
// withProfiler(fn, options) and profile(fn, options): start, run, stop in
// `finally`, for synchronous and async functions alike.
//
// Options are start()'s (intervalMs, maxStackDepth, nativeUnwinding,
// bufferSamples) plus:
//   symbolicate  name the frames before returning (default true)
//   output       also save the profile there (format by extension)
//   format       the format for `output`, whatever its extension
//   onProfile    profile() only: called with each call's profile

const { api, checkStartOptions } = require('./addon.js')
const { checkWritable } = require('./output.js')

const OWN_KEYS = ['symbolicate', 'output', 'format', 'onProfile']

function einval(message) {
  return Object.assign(new Error(message), { code: 'EINVAL' })
}

function isThenable(v) {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function'
}

/** Splits our options from start()'s, checking ours. */
function split(options, allowOnProfile) {
  if (options === undefined) return { start: undefined, own: {} }
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw einval(`options must be an object, got ${options === null ? 'null' : typeof options}`)
  }
  const start = {}
  const own = {}
  for (const [k, v] of Object.entries(options)) {
    if (OWN_KEYS.includes(k)) own[k] = v
    else start[k] = v
  }
  if (own.onProfile !== undefined && (!allowOnProfile || typeof own.onProfile !== 'function')) {
    throw einval(allowOnProfile ? 'options.onProfile must be a function' : 'options.onProfile is for profile() only')
  }
  if (own.symbolicate !== undefined && typeof own.symbolicate !== 'boolean') {
    throw einval('options.symbolicate must be a boolean')
  }
  if (own.output !== undefined && typeof own.output !== 'string') throw einval('options.output must be a string')
  if (own.format !== undefined) api.parseFormatName(own.format)
  // start()'s own checks, now: profile() wraps long before its first call.
  try {
    checkStartOptions(start)
  } catch (e) {
    if (e.code === 'EINVAL' && /valid options are/.test(e.message)) {
      e.message += `, ${OWN_KEYS.filter((k) => allowOnProfile || k !== 'onProfile').join(', ')}`
    }
    throw e
  }
  // Before any work is done: a mistyped directory must not cost the run.
  if (own.output !== undefined) checkWritable(own.output)
  return { start, own }
}

/**
 * Stops, names and saves, in one call; the profile. An output refused at
 * stop() (its directory went away meanwhile) leaves the sampler running:
 * it is stopped all the same, and the profile handed back on the error.
 */
function finish(own) {
  const options = { symbolicate: own.symbolicate !== false }
  if (own.output !== undefined) options.output = own.output
  if (own.format !== undefined) options.format = own.format
  try {
    return api.stop(options)
  } catch (e) {
    if (own.output !== undefined && api.isRunning()) e.profile = api.stop({ symbolicate: options.symbolicate })
    throw e
  }
}

/**
 * Runs `fn` with the sampler on; returns `{ result, profile }`, or a
 * promise of it when `fn` returns a promise. If `fn` throws (or its
 * promise rejects), the sampler is stopped (and the profile saved to
 * `output`, if given) before the error is passed on unchanged.
 */
function run(fn, own, start) {
  if (typeof fn !== 'function') throw einval(`fn must be a function, got ${typeof fn}`)
  // Options were checked by split(): what start() can still refuse is the
  // moment (EAGAIN, already sampling).
  api.start(start)
  let result
  try {
    result = fn()
  } catch (e) {
    finishQuietly(own)
    throw e
  }
  if (!isThenable(result)) return { result, profile: finish(own) }
  return Promise.resolve(result).then(
    (value) => ({ result: value, profile: finish(own) }),
    (e) => {
      finishQuietly(own)
      throw e
    },
  )
}

/** finish() on an error path: the program's error matters more than ours. */
function finishQuietly(own) {
  try {
    finish(own)
  } catch {
    // Keep the original error.
  }
}

function withProfiler(fn, options) {
  const { start, own } = split(options, false)
  return run(fn, own, start)
}

/**
 * Wraps `fn` so that every call is profiled; the wrapper returns what `fn`
 * returns (a promise stays a promise) and hands each profile to
 * `options.onProfile` and/or saves it to `options.output`.
 */
function profile(fn, options) {
  if (typeof fn !== 'function') throw einval(`fn must be a function, got ${typeof fn}`)
  const { start, own } = split(options, true)
  const deliver = (out) => {
    if (own.onProfile) own.onProfile(out.profile)
    return out.result
  }
  // An async function's caller handles failure on its promise: an error
  // starting the sampler (EAGAIN, another call still running) is a
  // rejection there, not a throw.
  const isAsync = fn.constructor && fn.constructor.name === 'AsyncFunction'
  const wrapped = function (...args) {
    let out
    try {
      out = run(() => fn.apply(this, args), own, start)
    } catch (e) {
      if (isAsync) return Promise.reject(e)
      throw e
    }
    return isThenable(out) ? out.then(deliver) : deliver(out)
  }
  Object.defineProperty(wrapped, 'name', { value: fn.name })
  return wrapped
}

module.exports = { withProfiler, profile }
