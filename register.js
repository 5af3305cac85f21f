'use strict'
// Preload that profiles a whole Node program: `node -r machsampler/register
// app.js`, or through `machsampler record`, which adds it to NODE_OPTIONS.
//
// It starts the sampler before the program runs and writes the profile when
// the process ends: a normal end, process.exit(), an uncaught exception or
// unhandled rejection (all of which emit 'exit'), or SIGINT, SIGTERM and
// SIGHUP. It must not change how the program behaves:
// - exit codes are untouched ('exit' listeners cannot change them);
// - a signal the program handles itself is left to the program (if it then
//   exits, 'exit' writes the profile); a signal nobody else handles is
//   re-raised after the profile is written, so the process still dies of it
//   and its parent sees the same signal;
// - failures of the sampler are one line on stderr, never a crash.
//
// Settings come from the environment:
//   MACHSAMPLER_INTERVAL_MS, MACHSAMPLER_MAX_STACK_DEPTH  sampler options
//   MACHSAMPLER_DURATION_S   stop sampling after this many seconds
//   MACHSAMPLER_SESSION_DIR  set by `machsampler record`: write the raw
//                            profile there for the CLI to symbolicate, and
//                            a status file for its live progress line
//   MACHSAMPLER_OUTPUT       without the CLI: the file to write (format by
//                            extension), default machsampler-<pid>.machprof

const fs = require('fs')
const path = require('path')
const { isMainThread } = require('worker_threads')

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP']

function warn(message) {
  try {
    fs.writeSync(2, `machsampler: ${message}\n`)
  } catch {
    // stderr closed: nothing more to do.
  }
}

function envNumber(name) {
  const v = process.env[name]
  return v === undefined || v === '' ? undefined : Number(v)
}

/**
 * With the CLI, only one process records: the first Node process of the
 * command to claim the session (a command may be a shell script or start
 * more Node processes; they inherit NODE_OPTIONS). The claim is an
 * exclusive create, so two processes cannot both win.
 */
function claim(sessionDir) {
  try {
    fs.closeSync(fs.openSync(path.join(sessionDir, 'claim'), 'wx'))
    return true
  } catch {
    return false
  }
}

/** Gives the program back the environment it was started with. */
function restoreEnvironment() {
  const original = process.env.MACHSAMPLER_ORIGINAL_NODE_OPTIONS
  if (original === undefined) return // not started by the CLI
  if (original === '') delete process.env.NODE_OPTIONS
  else process.env.NODE_OPTIONS = original
  for (const key of Object.keys(process.env)) {
    if (key.startsWith('MACHSAMPLER_')) delete process.env[key]
  }
}

function main() {
  // Worker threads run preloads too. The sampler is process-wide already;
  // loading the addon here registers the worker's V8 isolate, so its
  // JavaScript frames are named.
  if (!isMainThread) {
    require('./index.js')
    return
  }
  const sessionDir = process.env.MACHSAMPLER_SESSION_DIR
  if (sessionDir && !claim(sessionDir)) return
  const options = {
    intervalMs: envNumber('MACHSAMPLER_INTERVAL_MS'),
    maxStackDepth: envNumber('MACHSAMPLER_MAX_STACK_DEPTH'),
    jsNames: process.env.MACHSAMPLER_NO_JS_NAMES === '1' ? false : undefined,
  }
  const durationS = envNumber('MACHSAMPLER_DURATION_S')
  const output = sessionDir
    ? path.join(sessionDir, 'raw.machprof')
    : path.resolve(process.env.MACHSAMPLER_OUTPUT || `machsampler-${process.pid}.machprof`)
  const live = sessionDir && process.env.MACHSAMPLER_LIVE === '1'
  // The program's children must not inherit the preload.
  restoreEnvironment()

  const ms = require('./index.js')
  try {
    ms.start(options)
  } catch (e) {
    warn(`cannot start sampling: ${e.message}`)
    return
  }

  let statusTimer = null
  const statusFile = sessionDir && path.join(sessionDir, 'status.json')
  function writeStatus(state) {
    try {
      fs.writeFileSync(statusFile, JSON.stringify({ state, samples: ms.stats().samplesCaptured }))
    } catch {
      // Progress is cosmetic; the profile is what matters.
    }
  }

  let saved = false
  function save() {
    if (saved) return
    saved = true
    if (statusTimer) clearInterval(statusTimer)
    let profile
    try {
      profile = ms.stop()
    } catch (e) {
      warn(`cannot stop sampling: ${e.message}`)
      return
    }
    try {
      if (sessionDir) {
        // Raw and uncompressed: fast to write while the process exits. The
        // CLI symbolicates it while the binaries and perf map still exist.
        ms.saveProfile(profile, output, { format: 'machprof', compress: false })
        if (live) writeStatus('done')
      } else {
        profile.symbols = ms.symbolicate(profile)
        ms.saveProfile(profile, output)
        warn(`wrote ${output}`)
      }
    } catch (e) {
      warn(e.message)
    }
  }

  process.on('exit', save)
  for (const signal of SIGNALS) {
    const onSignal = () => {
      // Someone else listens: the program decides what the signal means.
      if (process.listenerCount(signal) > 1) return
      save()
      process.removeListener(signal, onSignal)
      process.kill(process.pid, signal)
    }
    process.on(signal, onSignal)
  }
  if (durationS !== undefined) {
    if (!(durationS > 0)) warn(`ignoring MACHSAMPLER_DURATION_S=${durationS}: not a positive number`)
    else setTimeout(save, durationS * 1000).unref()
  }
  if (live) {
    statusTimer = setInterval(() => writeStatus('recording'), 500)
    statusTimer.unref()
  }
}

main()
