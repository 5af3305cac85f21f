'use strict'
// The environment contract between `machsampler record`, which writes it
// for the program it runs, and register.js, the preload that reads it in
// that program. Nothing else reads or writes MACHSAMPLER_* variables,
// except the documented user settings below.
//
// Set by the CLI:
//   MACHSAMPLER_SESSION_DIR   where the program writes its raw profile and
//                             a status file for the live progress line
//   MACHSAMPLER_ORIGINAL_NODE_OPTIONS  NODE_OPTIONS before the preload was added
//   MACHSAMPLER_INTERVAL_MS, MACHSAMPLER_MAX_STACK_DEPTH,
//   MACHSAMPLER_BUFFER_SAMPLES, MACHSAMPLER_MODE  sampler options
//   MACHSAMPLER_NO_JS_NAMES=1 start({ jsNames: false })
//   MACHSAMPLER_DURATION_S    stop sampling after this many seconds
//   MACHSAMPLER_LIVE=1        keep the status file up to date
//   MACHSAMPLER_FOLLOW=1      every Node.js process of the command records
//                             (the preload stays in NODE_OPTIONS for its
//                             children); unset: only the first one does
//   MACHSAMPLER_STALLS_MS     watch the main thread's event loop for stalls
//                             this long; each goes to the session directory
//                             as stall-<n>.machprof and stall-<n>.txt
// Set by users (with `node -r machsampler/register`):
//   MACHSAMPLER_OUTPUT        the file to write, default
//                             machsampler-<pid>.machprof
//   MACHSAMPLER_INTERVAL_MS, MACHSAMPLER_MAX_STACK_DEPTH, MACHSAMPLER_DURATION_S
// Set by users, read by symbolization (the addon's symbolicate() and the
// CLI's --symbol-path default):
//   MACHSAMPLER_SYMBOL_PATH   symbol directories and symbol servers,
//                             separated by ';'

const path = require('path')

const REGISTER = path.join(__dirname, '..', 'register.js')
const PREFIX = 'MACHSAMPLER_'

/** NODE_OPTIONS quoting: values with spaces or quotes go in double quotes. */
function quote(arg) {
  return /[\s"\\]/.test(arg) ? `"${arg.replace(/(["\\])/g, '\\$1')}"` : arg
}

/**
 * The environment for a program `record` runs: the caller's, with the
 * preload added to NODE_OPTIONS and the session settings.
 */
function forRecordedProgram(
  base,
  { sessionDir, intervalMs, maxStackDepth, bufferSamples, mode, durationS, jsNames, live, follow = false, stallsMs, checkpointS, nodeFlags = [], v8Log },
) {
  const original = base.NODE_OPTIONS || ''
  const env = {
    ...base,
    NODE_OPTIONS: [original, `--require ${quote(REGISTER)}`, ...nodeFlags].filter(Boolean).join(' '),
    MACHSAMPLER_ORIGINAL_NODE_OPTIONS: original,
    MACHSAMPLER_SESSION_DIR: sessionDir,
  }
  if (jsNames === false) env.MACHSAMPLER_NO_JS_NAMES = '1'
  if (intervalMs !== undefined) env.MACHSAMPLER_INTERVAL_MS = String(intervalMs)
  if (maxStackDepth !== undefined) env.MACHSAMPLER_MAX_STACK_DEPTH = String(maxStackDepth)
  if (bufferSamples !== undefined) env.MACHSAMPLER_BUFFER_SAMPLES = String(bufferSamples)
  if (mode !== undefined) env.MACHSAMPLER_MODE = mode
  if (durationS !== undefined) env.MACHSAMPLER_DURATION_S = String(durationS)
  if (live) env.MACHSAMPLER_LIVE = '1'
  if (follow) env.MACHSAMPLER_FOLLOW = '1'
  if (stallsMs !== undefined) env.MACHSAMPLER_STALLS_MS = String(stallsMs)
  if (checkpointS !== undefined) env.MACHSAMPLER_CHECKPOINT_S = String(checkpointS)
  // The --logfile the program's V8 writes (`record` adds the flags): the
  // addon reads it at stop() to split out inlined functions.
  if (v8Log !== undefined) env.MACHSAMPLER_V8_LOG = v8Log
  return env
}

// A plain decimal number, as the CLI writes them: `Number()` would also
// take '0x10', '1e1' and ' 5 ', which start() refuses when given directly.
const DECIMAL = /^[0-9]+(\.[0-9]+)?$/

function number(env, name, bad) {
  const v = env[name]
  if (v === undefined || v === '') return undefined
  if (DECIMAL.test(v)) return Number(v)
  bad.push(`${name} must be a decimal number, got '${v}'`)
  return undefined
}

/** What register.js is asked to do. */
function readSettings(env) {
  const sessionDir = env.MACHSAMPLER_SESSION_DIR || undefined
  // Settings that are not numbers: register.js refuses to sample.
  const bad = []
  return {
    sessionDir,
    bad,
    start: {
      intervalMs: number(env, 'MACHSAMPLER_INTERVAL_MS', bad),
      maxStackDepth: number(env, 'MACHSAMPLER_MAX_STACK_DEPTH', bad),
      bufferSamples: number(env, 'MACHSAMPLER_BUFFER_SAMPLES', bad),
      mode: env.MACHSAMPLER_MODE || undefined,
      jsNames: env.MACHSAMPLER_NO_JS_NAMES === '1' ? false : undefined,
    },
    durationS: number(env, 'MACHSAMPLER_DURATION_S', bad),
    output: sessionDir ? undefined : env.MACHSAMPLER_OUTPUT || undefined,
    live: Boolean(sessionDir) && env.MACHSAMPLER_LIVE === '1',
    follow: Boolean(sessionDir) && env.MACHSAMPLER_FOLLOW === '1',
    stallsMs: sessionDir ? number(env, 'MACHSAMPLER_STALLS_MS', bad) : undefined,
    checkpointS: sessionDir ? number(env, 'MACHSAMPLER_CHECKPOINT_S', bad) : undefined,
  }
}

/**
 * Gives a recorded program back the environment it was started with, so
 * its children do not inherit the preload. Does nothing outside `record`.
 */
function restoreOriginal(env) {
  const original = env.MACHSAMPLER_ORIGINAL_NODE_OPTIONS
  if (original === undefined) return
  if (original === '') delete env.NODE_OPTIONS
  else env.NODE_OPTIONS = original
  for (const key of Object.keys(env)) {
    if (key.startsWith(PREFIX)) delete env[key]
  }
}

/**
 * For `record`, following processes: the environment `childEnv` a program
 * gives a child of its own accord (`env: { ...process.env, NODE_OPTIONS:
 * '--max-old-space-size=4096' }`, or a minimal one), with this process's
 * preload and session settings (`own`) put back, so a Node child records
 * too. An environment that already has the preload is returned as it is.
 */
function withPreload(childEnv, own) {
  const ours = own.NODE_OPTIONS || ''
  const original = own.MACHSAMPLER_ORIGINAL_NODE_OPTIONS
  // What record added to NODE_OPTIONS: after the program's own part.
  const added = original !== undefined && ours.startsWith(original) ? ours.slice(original.length).trim() : ''
  const theirs = childEnv.NODE_OPTIONS || ''
  if (!added || theirs.includes(REGISTER)) return childEnv
  const env = { ...childEnv }
  for (const [key, value] of Object.entries(own)) {
    if (key.startsWith(PREFIX) && env[key] === undefined) env[key] = value
  }
  env.MACHSAMPLER_ORIGINAL_NODE_OPTIONS = theirs
  env.NODE_OPTIONS = [theirs, added].filter(Boolean).join(' ')
  return env
}

/** MACHSAMPLER_SYMBOL_PATH, or undefined if unset or empty. */
function symbolPath(env) {
  return env.MACHSAMPLER_SYMBOL_PATH || undefined
}

// The flags that make node log what its optimized code inlined, for
// MACHSAMPLER_V8_LOG (only on node's command line: V8 flags are refused in
// NODE_OPTIONS). See docs/design/inlined-js-frames.md.
const V8_LOG_FLAGS = ['--log-code', '--logfile-per-isolate']
const V8_LOG_POSITION_FLAG = '--log-source-position' // V8 10.8 on; 10.2 logs positions with --log-code
// --log-source-position also writes each script's whole source to the log, once
// per isolate; nothing reads it, and in a pool of workers loading a large
// bundle that writing was a third of the workers' time. V8 10.2 cannot be
// told not to (it has no --log-source-position either).
const V8_NO_SOURCE_FLAG = '--no-log-source-code'

/**
 * The flags that make `node` log what its optimized code inlined into
 * `logfile`, or none if it cannot say which it takes.
 */
function v8LogFlags(node, logfile) {
  const r = require('child_process').spawnSync(node, ['--v8-options'], { encoding: 'utf8', timeout: 10000, maxBuffer: 16 << 20 })
  if (r.status !== 0 || !/--log-code\b/.test(r.stdout || '')) return []
  const position = r.stdout.includes(V8_LOG_POSITION_FLAG) ? [V8_LOG_POSITION_FLAG, V8_NO_SOURCE_FLAG] : []
  return [...V8_LOG_FLAGS, ...position, `--logfile=${logfile}`]
}

/** Whether `arg` is one of the flags v8LogFlags gives for `logfile`. */
function isV8LogFlag(arg, logfile) {
  return V8_LOG_FLAGS.includes(arg) || arg === V8_LOG_POSITION_FLAG || arg === V8_NO_SOURCE_FLAG || arg === `--logfile=${logfile}`
}

/**
 * Where v8LogFlags' block for `logfile` is in `argv`: [first, end), or null.
 * Only that block: a program's own --log-code elsewhere is its own.
 */
function v8LogBlock(argv, logfile) {
  const last = argv.indexOf(`--logfile=${logfile}`)
  if (last < 0) return null
  let first = last
  while (first > 0 && isV8LogFlag(argv[first - 1], logfile)) first--
  return [first, last + 1]
}

/**
 * Why `seconds` is no period of checkpoints (0: at signals only, or 0.1 to
 * 86400), or null if it is one.
 */
function badCheckpointSeconds(seconds, given = seconds) {
  return seconds === 0 || (seconds >= 0.1 && seconds <= 86400) ? null : `must be 0 (none) or between 0.1 and 86400 seconds, got '${given}'`
}

/** Whether node `argv` asks V8 for a log of its own (--prof, --log-*, --logfile). */
function asksForV8Log(argv) {
  return argv.some((a) => /^--(no-)?(prof|log)[\w-]*(=|$)/.test(a))
}

module.exports = { forRecordedProgram, readSettings, restoreOriginal, withPreload, quote, symbolPath, v8LogFlags, v8LogBlock, asksForV8Log, badCheckpointSeconds }
