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
// Settings come from the environment (lib/env.js).

const fs = require('fs')
const path = require('path')
const { isMainThread } = require('worker_threads')

const env = require('./lib/env.js')

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP']

function warn(message) {
  try {
    fs.writeSync(2, `machsampler: ${message}\n`)
  } catch {
    // stderr closed: nothing more to do.
  }
}

/**
 * With the CLI and --no-follow, only one process records: the first Node
 * process of the command to claim the session (a command may be a shell
 * script or start more Node processes; they inherit NODE_OPTIONS). The
 * claim is an exclusive create, so two processes cannot both win. When
 * following (the default), every process records into its own files, and
 * the claim only tells `record` that sampling started.
 */
function claim(sessionDir) {
  try {
    fs.closeSync(fs.openSync(path.join(sessionDir, 'claim'), 'wx'))
    return true
  } catch {
    return false
  }
}

// ---- what only Node knows: which script each Worker runs -------------------
// `record` names a worker thread `worker <threadId> (<script>)`. The main
// thread logs each Worker's threadId and script; the worker thread logs its
// threadId and OS thread id (Linux: /proc/thread-self). The CLI joins them.

function threadLog(sessionDir) {
  return path.join(sessionDir, `threads-${process.pid}.jsonl`)
}

function logLine(file, record) {
  try {
    fs.appendFileSync(file, JSON.stringify(record) + '\n')
  } catch {
    // Names are a convenience: the profile is what matters.
  }
}

function osThreadId() {
  try {
    return Number(fs.readlinkSync('/proc/thread-self').split('/').pop()) || undefined
  } catch {
    return undefined // not Linux
  }
}

function scriptOf(filename, options) {
  if (options && options.eval) return '[eval]'
  if (filename instanceof URL) filename = filename.href
  const s = String(filename)
  if (s.startsWith('file:')) return require('url').fileURLToPath(s)
  if (/^[a-z]+:/i.test(s)) return s
  return path.resolve(s)
}

function watchWorkers(sessionDir) {
  const wt = require('worker_threads')
  const Base = wt.Worker
  const log = threadLog(sessionDir)
  class Worker extends Base {
    constructor(filename, options) {
      super(filename, options)
      logLine(log, { threadId: this.threadId, script: scriptOf(filename, options) })
    }
  }
  wt.Worker = Worker
}

// ---- child processes ----------------------------------------------------------
// Node children record themselves (they inherit NODE_OPTIONS); the others
// are listed by `record` from this log, so a user sees what was not profiled.

function watchChildren(sessionDir, v8LogFlags) {
  const cp = require('child_process')
  const log = path.join(sessionDir, `children-${process.pid}.jsonl`)
  const spawn = cp.ChildProcess.prototype.spawn
  // An environment the program chose for a child keeps the preload.
  const own = { ...process.env }
  const keepPreload = (options) => {
    if (!options || !Array.isArray(options.envPairs)) return
    const given = {}
    for (const pair of options.envPairs) {
      const at = pair.indexOf('=')
      if (at > 0) given[pair.slice(0, at)] = pair.slice(at + 1)
    }
    const kept = env.withPreload(given, own)
    if (kept !== given) options.envPairs = Object.entries(kept).map(([k, v]) => `${k}=${v}`)
  }
  cp.ChildProcess.prototype.spawn = function (options) {
    try {
      keepPreload(options)
    } catch {
      // The child starts as the program asked, unprofiled.
    }
    const r = Reflect.apply(spawn, this, arguments)
    if (this.pid) logLine(log, { pid: this.pid, command: (options && options.args ? options.args : [options && options.file]).join(' ') })
    return r
  }
  // The synchronous calls bypass ChildProcess. spawnSync returns the child's
  // pid; execFileSync and execSync return only its output (their errors carry
  // the pid), so without one the child is logged with the time it ran, and
  // `record` matches it against the Node processes this one started then.
  const sync = (name, command) => {
    const original = cp[name]
    if (typeof original !== 'function') return
    cp[name] = function (...args) {
      // (file, [args], options) or (command, options): an options object
      // with an environment of its own keeps the preload.
      try {
        const at = args.findIndex((a, i) => i > 0 && a && typeof a === 'object' && !Array.isArray(a) && a.env)
        if (at > 0) args[at] = { ...args[at], env: env.withPreload(args[at].env, own) }
      } catch {
        // The child starts as the program asked, unprofiled.
      }
      const from = Date.now()
      let pid = null
      let returned = false
      try {
        const r = Reflect.apply(original, this, args)
        if (r && typeof r.pid === 'number') pid = r.pid
        returned = true
        return r
      } catch (e) {
        if (e && typeof e.pid === 'number') pid = e.pid
        throw e
      } finally {
        // pid 0: nothing was started (a missing program, bad arguments).
        if (pid > 0 || (returned && pid === null)) {
          logLine(log, { pid, command: command(args), parent: process.pid, from, to: Date.now() })
        }
      }
    }
  }
  // fork() passes process.execArgv on, which no longer holds V8's log flags
  // (see takeV8LogFlags): a node child forked while `record` runs gets them
  // back, so its inlined functions are split out too.
  if (v8LogFlags.length > 0) {
    const fork = cp.fork
    cp.fork = function (modulePath, ...rest) {
      try {
        // (modulePath, [args], [options]): options is the first object that is no array.
        const at = rest[0] !== null && typeof rest[0] === 'object' && !Array.isArray(rest[0]) ? 0 : 1
        const options = rest[at] !== null && typeof rest[at] === 'object' ? rest[at] : {}
        let execArgv = options.execArgv || process.execArgv
        // As fork() itself does: a child of `node -e` must not run the code again.
        if (execArgv === process.execArgv && process._eval != null) {
          const i = execArgv.lastIndexOf(process._eval)
          if (i > 0) execArgv = [...execArgv.slice(0, i - 1), ...execArgv.slice(i + 1)]
        }
        // Not for another program (the flags are this node's), nor over a
        // log the child asks for itself.
        const sameNode = options.execPath === undefined || options.execPath === process.execPath
        if (sameNode && Array.isArray(execArgv) && !env.asksForV8Log(execArgv) && fs.existsSync(sessionDir)) {
          while (rest.length < at) rest.push(undefined)
          rest[at] = { ...options, execArgv: [...v8LogFlags, ...execArgv] }
        }
      } catch {
        // The child starts as the program asked, without V8's log.
      }
      return Reflect.apply(fork, this, [modulePath, ...rest])
    }
  }
  const fileAndArgs = (a) => [a[0], ...(Array.isArray(a[1]) ? a[1] : [])].join(' ')
  sync('spawnSync', fileAndArgs)
  sync('execFileSync', fileAndArgs)
  const shell = (o) => (o && typeof o.shell === 'string' ? o.shell : '/bin/sh')
  sync('execSync', (a) => `${shell(a[1])} -c ${a[0]}`)
  // ES modules that import these by name see the wrapped functions too.
  require('module').syncBuiltinESMExports()
}

/**
 * Takes the flags `record` put on node's command line for V8's code log
 * out of process.execArgv, where the program would see them and fork()
 * would pass them on: a child started after `record` has ended (and removed
 * the log's directory) would have V8 write its log to the child's stdout.
 * Returns them.
 */
function takeV8LogFlags() {
  const log = process.env.MACHSAMPLER_V8_LOG
  const block = log ? env.v8LogBlock(process.execArgv, log) : null
  if (!block) return []
  return process.execArgv.splice(block[0], block[1] - block[0])
}

function main() {
  const settings = env.readSettings(process.env)
  const { sessionDir } = settings
  const v8LogFlags = takeV8LogFlags()
  // Worker threads run preloads too. The sampler is process-wide already;
  // a worker says which OS thread it is and registers its isolate.
  if (!isMainThread) {
    if (sessionDir) logLine(threadLog(sessionDir), { threadId: require('worker_threads').threadId, tid: osThreadId() })
    // Loading the addon registers this worker's isolate now, before its
    // code runs. Found from its first sample instead, code V8 optimized
    // by then (a hot loop's on-stack replacement) would stay unnamed.
    try {
      require('./lib/addon.js')
    } catch {
      // The main thread reports a missing addon.
    }
    return
  }
  if (sessionDir && !claim(sessionDir) && !settings.follow) return
  const output = sessionDir
    ? path.join(sessionDir, settings.follow ? `raw-${process.pid}.machprof` : 'raw.machprof')
    : path.resolve(settings.output || `machsampler-${process.pid}.machprof`)
  if (settings.follow) {
    // Children keep the preload in NODE_OPTIONS: each records itself.
    try {
      const info = { pid: process.pid, ppid: process.ppid, argv: [process.argv0, ...process.execArgv, ...process.argv.slice(1)], startedMs: Date.now() }
      fs.writeFileSync(path.join(sessionDir, `proc-${process.pid}.json`), JSON.stringify(info))
    } catch {
      // The CLI then lists the profile without its command line.
    }
    watchChildren(sessionDir, v8LogFlags)
  } else {
    // The program's children must not inherit the preload.
    env.restoreOriginal(process.env)
  }
  if (sessionDir) watchWorkers(sessionDir)

  if (settings.bad.length) {
    warn(`cannot start sampling: ${settings.bad[0]}`)
    return
  }
  if (!sessionDir) {
    // MACHSAMPLER_OUTPUT: a profile that cannot be written is said now,
    // not after the whole run.
    try {
      require('./lib/output.js').checkWritable(output)
      // Throws (EINVAL, naming the extensions) for a name no format has.
      require('./lib/addon.js').api.formatFromPath(output)
    } catch (e) {
      warn(`cannot start sampling: ${e.message}`)
      return
    }
  }
  const ms = require('./index.js')
  const { durationS } = settings
  const start = { ...settings.start }
  if (durationS !== undefined) {
    // The sampler thread ends sampling on time however busy JavaScript is;
    // the profile is written when the program ends.
    // Refused as a bad MACHSAMPLER_INTERVAL_MS is: nothing is sampled,
    // rather than a whole run when a part was asked for.
    if (!(durationS >= 0.001 && durationS <= 1e9)) {
      warn(`cannot start sampling: MACHSAMPLER_DURATION_S must be between 0.001 and 1000000000 seconds, got '${durationS}'`)
      return
    }
    start.durationMs = Math.max(1, Math.round(durationS * 1000))
  }
  try {
    ms.start(start)
  } catch (e) {
    warn(`cannot start sampling: ${e.message}`)
    return
  }

  if (settings.stallsMs !== undefined) watchForRecord(ms, sessionDir, settings.stallsMs, settings.follow)

  let statusTimer = null
  const statusFile = sessionDir && path.join(sessionDir, `status-${process.pid}.json`)
  function writeStatus(state) {
    try {
      fs.writeFileSync(statusFile, JSON.stringify({ state, samples: ms.stats().samplesCaptured }))
    } catch {
      // Progress is cosmetic; the profile is what matters.
    }
  }

  const { exitSave } = require('./lib/addon.js')
  let saved = false
  function save() {
    if (saved) return
    saved = true
    // A signal's native save (below) has it: wait until it is written;
    // the signal then ends the process.
    if (!exitSave.claim()) {
      exitSave.wait()
      return
    }
    if (statusTimer) clearInterval(statusTimer)
    try {
      if (sessionDir) {
        // Raw and uncompressed: fast to write while the process exits. The
        // CLI names the frames while the binaries and perf map still exist.
        ms.stop({ output, format: 'machprof', compress: false })
        writeSourceMaps(sessionDir)
        if (settings.live) writeStatus('done')
      } else {
        ms.stop({ symbolicate: true, output })
        warn(`wrote ${output}`)
      }
    } catch (e) {
      // The session's directory gone: `record` has ended (a detached child
      // outliving it), and nobody would read the profile.
      if (!(sessionDir && !fs.existsSync(sessionDir))) warn(e.message)
    }
  }

  process.on('exit', save)
  // A program that replaces itself (process.execve) never emits 'exit':
  // write the profile first.
  if (typeof process.execve === 'function') {
    const execve = process.execve
    process.execve = function (...args) {
      save()
      return Reflect.apply(execve, this, args)
    }
  }
  // Tells `machsampler record` which signals reached this process, so it
  // forwards only those that did not (a signal sent to the whole process
  // group reaches both).
  const signalLog = sessionDir && path.join(sessionDir, 'signals')
  for (const signal of SIGNALS) {
    const onSignal = () => {
      if (signalLog) {
        try {
          fs.appendFileSync(signalLog, `${signal}\n`)
        } catch {
          // The CLI then forwards it after a short wait: harmless.
        }
      }
      // Someone else listens: the program decides what the signal means.
      if (process.listenerCount(signal) > 1) return
      save()
      process.removeListener(signal, onSignal)
      process.kill(process.pid, signal)
    }
    process.on(signal, onSignal)
  }
  // JavaScript listeners run from the event loop, which a busy main thread
  // never reaches: then the addon's own handler, after a short wait, saves
  // the profile and lets the signal end the process (unless the program
  // listens for that signal itself: it decides, as without machsampler).
  const ours = new Set()
  for (const signal of SIGNALS) for (const l of process.listeners(signal)) ours.add(l)
  const programListens = (signal, delta) => process.listeners(signal).filter((l) => !ours.has(l)).length + delta > 0
  process.on('newListener', (event, listener) => {
    if (SIGNALS.includes(event) && !ours.has(listener)) exitSave.setProgramListens(event, programListens(event, 1))
  })
  process.on('removeListener', (event) => {
    if (SIGNALS.includes(event)) exitSave.setProgramListens(event, programListens(event, 0))
  })
  try {
    exitSave.arm(
      sessionDir
        ? {
            signals: SIGNALS,
            graceMs: SIGNAL_GRACE_MS,
            output,
            format: 'machprof',
            compress: false,
            sourceMaps: sourceMapsFile(sessionDir),
            // Kept at each signal, for a process killed before it saves
            // (a wrapper such as tsx sends SIGKILL to a child that does not
            // answer its relayed Ctrl-C within 60 ms), and every
            // --checkpoint seconds, for one killed with no signal first.
            checkpoint: output.replace(/\.machprof$/, '.partial.machprof'),
            ...checkpointEvery(settings.checkpointS),
          }
        : { signals: SIGNALS, graceMs: SIGNAL_GRACE_MS, output, symbolicate: true, announce: true },
    )
  } catch (e) {
    warn(`a busy program ended by a signal will not be saved: ${e.message}`)
  }

  if (settings.live) {
    statusTimer = setInterval(() => writeStatus('recording'), 500)
    statusTimer.unref()
  }
}

/**
 * armExitSignals' period of checkpoints, from MACHSAMPLER_CHECKPOINT_S
 * (0: at signals only). A value out of range drops the periodic ones only,
 * not the save at a signal.
 */
function checkpointEvery(seconds) {
  if (seconds === undefined || seconds === 0) return {}
  const bad = env.badCheckpointSeconds(seconds)
  if (bad) {
    warn(`no periodic checkpoints: MACHSAMPLER_CHECKPOINT_S ${bad}`)
    return {}
  }
  return { checkpointEveryMs: Math.round(seconds * 1000) }
}

/** Where this process leaves the maps of scripts compiled in memory for `record`. */
function sourceMapsFile(sessionDir) {
  return path.join(sessionDir, `source-maps-${process.pid}.json`)
}

/**
 * The maps of scripts compiled in memory (see lib/compiled-maps.js), on
 * every thread, for the CLI, which names the frames in its own process.
 */
function writeSourceMaps(sessionDir) {
  const noted = require('./lib/addon.js').sourceMaps.noted()
  if (noted.length === 0) return
  const file = sourceMapsFile(sessionDir)
  try {
    fs.writeFileSync(`${file}.tmp`, JSON.stringify(noted))
    fs.renameSync(`${file}.tmp`, file)
  } catch {
    // Those functions are then shown at their compiled positions.
  }
}

/**
 * `record --stalls <ms>`: each stall of the main thread's loop goes to the
 * session directory (its summary first, then the profile, atomically), for
 * the CLI to convert and print. A stall that lasts long enough is written
 * from the sampler's side too, as a hang: a deadlocked program never runs
 * JavaScript again, and may only end by SIGKILL.
 */
function watchForRecord(ms, sessionDir, thresholdMs, follow) {
  let n = 0
  // Several processes share the directory when they are followed.
  const stem = follow ? `stall-${process.pid}-` : 'stall-'
  try {
    ms.watchStalls({
      thresholdMs,
      hangAfterMs: Math.max(HANG_AFTER_MS, 2 * thresholdMs),
      hangDir: sessionDir,
      onStall(stall) {
        n += 1
        try {
          fs.writeFileSync(path.join(sessionDir, `${stem}${n}.txt`), stall.summary)
          ms.saveProfile(stall.profile, path.join(sessionDir, `${stem}${n}.machprof`), { format: 'machprof', compress: false })
        } catch (e) {
          warn(`cannot write stall ${n}: ${e.message}`)
        }
      },
    })
  } catch (e) {
    warn(`cannot watch for stalls: ${e.message}`)
  }
}

/** How long JavaScript has to save the profile after a signal before the addon does. */
const SIGNAL_GRACE_MS = 300

/** How long a stall lasts before `record --stalls` writes it as a hang, at least. */
const HANG_AFTER_MS = 10000

main()
