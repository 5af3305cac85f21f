'use strict'
// `machsampler record [options] -- <command> [args...]`
//
// The program runs as a child with register.js preloaded through
// NODE_OPTIONS. The child writes a raw profile into a private session
// directory when it exits; this process then symbolicates it (the
// binaries and V8's perf map /tmp/perf-<pid>.map are still on disk),
// writes the requested format atomically, prints the summary and exits
// with the child's status.
//
// Everything that can be checked before the program runs is checked first
// (options, output format, output directory), so a typo does not cost a
// whole run.

const { spawn } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

const addon = require('../addon.js')
const { checkWritable } = require('../output.js')
const env = require('../env.js')
const { parse, number, CliError, USAGE } = require('./args')
const { help } = require('./help')
const { processFile, outputFormat, extensionOf, checkView } = require('./profile-io')
const follow = require('./follow')
const { symbolOptions, fetchFor, printWarnings } = require('./symbols')
const text = require('./text')
const { scratchDir } = require('./scratch')

// JavaScript frames are named from V8 itself while sampling (no flags).
// --perf-map also has V8 write /tmp/perf-<pid>.map (functions only, which
// keeps it small) with interpreted frames given a native frame of their
// own: the older way, for a V8 the addon cannot use. Both flags are allowed
// in NODE_OPTIONS.
const PERF_MAP_FLAGS = ['--perf-basic-prof-only-functions', '--interpreted-frames-native-stack']
// How often a recorded process keeps its profile so far, for one killed
// with no signal first (SIGKILL, the out-of-memory killer).
const DEFAULT_CHECKPOINT_S = 10
const LIVE_AFTER_MS = 1000
const LIVE_EVERY_MS = 250
const SPEC = {
  help: { type: 'boolean', short: 'h' },
  output: { type: 'string', short: 'o' },
  format: { type: 'string', short: 'f' },
  interval: { type: 'string' },
  mode: { type: 'string' },
  buffer: { type: 'string' },
  depth: { type: 'string' },
  duration: { type: 'string' },
  'no-jit-names': { type: 'boolean' },
  'no-inline': { type: 'boolean' },
  'perf-map': { type: 'boolean' },
  idle: { type: 'boolean' },
  'no-follow': { type: 'boolean' },
  view: { type: 'string' },
  quiet: { type: 'boolean', short: 'q' },
  'symbol-path': { type: 'string' },
  stalls: { type: 'string' },
  checkpoint: { type: 'string' },
}

/**
 * Whether `file` is where this command's standard output or error goes
 * (`/dev/stdout`, `/dev/fd/2`, or the file they are redirected to): the
 * program inherits both, so the profile comes after its output there
 * (`file`: a regular file, which writing the profile would replace).
 * `/dev/null` is no one's output.
 */
function sharedWithProgram(file) {
  let st
  try {
    st = fs.statSync(file)
  } catch {
    return null
  }
  if (st.isCharacterDevice() && st.rdev === fs.statSync('/dev/null', { throwIfNoEntry: false })?.rdev) return null
  for (const [fd, name] of [
    [1, 'standard output'],
    [2, 'standard error'],
  ]) {
    try {
      const o = fs.fstatSync(fd)
      if (o.dev === st.dev && o.ino === st.ino) return { name, file: st.isFile() }
    } catch {
      // Closed: nothing is shared.
    }
  }
  return null
}

function timestamp(d = new Date()) {
  const p = (n) => String(n).padStart(2, '0')
  return `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`
}

function parseRecordArgs(argv) {
  const { values, positionals, dashDash } = parse(argv, SPEC, { command: 'record', stopAtCommand: true })
  if (values.help) return { help: true }
  if (positionals.length === 0) {
    throw new CliError(
      dashDash
        ? `no command after '--'; usage: machsampler record [options] -- <command> [args...]`
        : `no command to record; usage: machsampler record [options] -- <command> [args...]`,
      USAGE,
    )
  }
  const intervalMs = number(values, 'interval')
  const maxStackDepth = number(values, 'depth')
  const bufferSamples = number(values, 'buffer')
  const mode = values.mode
  const startOptions = { intervalMs, maxStackDepth, bufferSamples, mode }
  for (const [key, flag] of [['intervalMs', '--interval'], ['maxStackDepth', '--depth'], ['bufferSamples', '--buffer'], ['mode', '--mode']]) {
    try {
      // start()'s own validation, so the limits and messages are the API's.
      addon.checkStartOptions({ [key]: startOptions[key] })
    } catch (e) {
      throw new CliError(`${flag}: ${e.message}`, USAGE)
    }
  }
  const stallsMs = number(values, 'stalls')
  if (stallsMs !== undefined) {
    try {
      // watchStalls()'s own validation, so the range and message are the API's.
      addon.checkWatchStallsOptions({ thresholdMs: stallsMs })
    } catch (e) {
      throw new CliError(`--stalls: ${e.message}`, USAGE)
    }
  }
  if (values['perf-map'] && values['no-jit-names']) {
    throw new CliError(
      '--perf-map and --no-jit-names contradict each other: --perf-map names JavaScript frames, --no-jit-names leaves them unnamed',
      USAGE,
    )
  }
  const durationS = number(values, 'duration')
  // start()'s limits (durationMs: whole milliseconds, 1 to 10^12), in seconds.
  if (durationS !== undefined && !(durationS >= 0.001 && durationS <= 1e9)) {
    throw new CliError(`--duration must be between 0.001 and 1000000000 seconds, got '${values.duration}'`, USAGE)
  }
  const checkpointS = number(values, 'checkpoint')
  const badCheckpoint = checkpointS === undefined ? null : env.badCheckpointSeconds(checkpointS, values.checkpoint)
  if (badCheckpoint) throw new CliError(`--checkpoint ${badCheckpoint}`, USAGE)
  const view = checkView(values.view)
  if (values.output === '-') {
    // The program writes to the same standard output while it runs.
    throw new CliError("record cannot write the profile to standard output, which the program shares; write a file, then 'machsampler convert <file> -o - --format <name>'", USAGE)
  }
  const shared = values.output ? sharedWithProgram(values.output) : null
  if (shared?.file) {
    // Written atomically, the profile would replace the file and what the
    // program wrote into it.
    throw new CliError(`record cannot write the profile to ${values.output}: it is the file this command's ${shared.name} goes to, and the program's output there would be lost; write another file`, USAGE)
  }
  const format = outputFormat(values.output || 'x.html', values.format)
  const output = values.output || `machsampler-${timestamp()}.${extensionOf(format)}`
  return {
    command: positionals[0],
    args: positionals.slice(1),
    output,
    format,
    intervalMs,
    maxStackDepth,
    bufferSamples,
    mode,
    durationS,
    stallsMs,
    checkpointS: checkpointS ?? DEFAULT_CHECKPOINT_S,
    jitNames: values['no-jit-names'] !== true,
    inline: values['no-inline'] !== true && values['no-jit-names'] !== true,
    perfMap: values['perf-map'] === true,
    includeIdle: values.idle === true,
    follow: values['no-follow'] !== true,
    view,
    quiet: values.quiet === true,
    symbols: symbolOptions(values),
    sharedOutput: shared,
  }
}

function childEnv(opts, sessionDir, live) {
  return env.forRecordedProgram(process.env, {
    sessionDir,
    intervalMs: opts.intervalMs,
    maxStackDepth: opts.maxStackDepth,
    bufferSamples: opts.bufferSamples,
    mode: opts.mode,
    durationS: opts.durationS,
    jsNames: opts.jitNames,
    live,
    follow: opts.follow,
    stallsMs: opts.stallsMs,
    checkpointS: opts.checkpointS,
    nodeFlags: opts.perfMap ? PERF_MAP_FLAGS : [],
    v8Log: opts.v8Log,
  })
}

/** Whether `command` runs Node.js itself (so V8 flags can go first). */
function isNode(command) {
  const base = path.basename(command).toLowerCase()
  return /^(node|nodejs)(\d+)?(\.exe)?$/.test(base) || path.resolve(command) === process.execPath
}

/** The live "recording…" line on a terminal, from the child's status file. */
function liveLine(sessionDir) {
  const started = Date.now()
  let shown = false
  let gone = false
  // A closed terminal (SIGHUP): nothing more to show, and nothing to fail.
  const onError = () => {
    gone = true
  }
  process.stderr.on('error', onError)
  const timer = setInterval(() => {
    if (gone) return
    const elapsed = Date.now() - started
    if (elapsed < LIVE_AFTER_MS) return
    // Every recording process keeps a status file: add them up.
    let samples = null
    for (const name of fs.readdirSync(sessionDir).filter((n) => /^status-\d+\.json$/.test(n))) {
      try {
        samples += JSON.parse(fs.readFileSync(path.join(sessionDir, name), 'utf8')).samples
      } catch {
        // Caught mid-write: counted next time.
      }
    }
    const count = samples === null ? '' : `, ${text.int(samples)} samples`
    process.stderr.write(`\r\x1b[2Kmachsampler: recording ${(elapsed / 1000).toFixed(1)} s${count}`)
    shown = true
  }, LIVE_EVERY_MS)
  return () => {
    clearInterval(timer)
    if (shown && !gone) process.stderr.write('\r\x1b[2K')
  }
}

/**
 * Runs the child. Resolves to its exit status (128+n for signal n), or
 * rejects with a CliError if it cannot be started.
 */
/** How many times the recorded program has logged `signal` (register.js). */
function signalsSeen(sessionDir, signal) {
  try {
    return fs.readFileSync(path.join(sessionDir, 'signals'), 'utf8').split('\n').filter((l) => l === signal).length
  } catch {
    return 0
  }
}

/** How long `record` waits for the program to show it got a signal itself. */
const SIGNAL_WAIT_MS = 500

function runChild(opts, env, sessionDir, onPid = () => {}) {
  return new Promise((resolve, reject) => {
    let child
    try {
      child = spawn(opts.command, opts.args, { stdio: 'inherit', env })
    } catch (e) {
      reject(spawnError(opts.command, e))
      return
    }
    onPid(child.pid)
    let exited = false
    // A signal sent to the whole process group (the terminal's Ctrl-C, a
    // supervisor's `kill -- -pgid`, `timeout`) reaches the program too;
    // forwarding it would deliver it twice, and a program may take a second
    // Ctrl-C as "exit now". A signal sent to this process alone is
    // forwarded. The recorded program logs the signals it gets: one is
    // forwarded only if, within a moment, the program has not logged as
    // many of that signal as this process got (counting, not comparing
    // with a count taken now: the program may log it before this runs).
    const received = {}
    const forward = (signal) => {
      received[signal] = (received[signal] || 0) + 1
      const cooperative = fs.existsSync(path.join(sessionDir, 'claim'))
      // Ctrl-C reaches every process of the terminal's foreground group;
      // a program that logs nothing cannot say it got it.
      if (signal === 'SIGINT' && process.stdin.isTTY && !cooperative) return
      const count = received[signal]
      const started = Date.now()
      const check = () => {
        if (exited || signalsSeen(sessionDir, signal) >= count) return
        if (cooperative && Date.now() - started < SIGNAL_WAIT_MS) {
          setTimeout(check, 20)
          return
        }
        try {
          child.kill(signal)
        } catch {
          // Already gone.
        }
      }
      setTimeout(check, cooperative ? 20 : 0)
    }
    const signals = ['SIGINT', 'SIGTERM', 'SIGHUP']
    for (const s of signals) process.on(s, forward)
    const done = () => {
      for (const s of signals) process.removeListener(s, forward)
    }
    child.on('error', (e) => {
      done()
      reject(spawnError(opts.command, e))
    })
    child.on('exit', (code, signal) => {
      exited = true
      done()
      resolve(signal ? 128 + (os.constants.signals[signal] || 0) : code)
    })
  })
}

function spawnError(command, e) {
  if (e.code === 'ENOENT') return new CliError(`cannot run '${command}': command not found`, 127)
  if (e.code === 'EACCES') return new CliError(`cannot run '${command}': permission denied`, 126)
  return new CliError(`cannot run '${command}': ${e.message}`, 126)
}

/**
 * The program wrote no profile: say why as well as we can tell, and exit
 * with its own status, or 1 if that was 0 (a run that recorded nothing
 * must not pass for a success).
 */
function noProfile(opts, status, sessionDir) {
  const killed = status > 128 ? ` (it died of signal ${status - 128})` : ''
  const started = fs.existsSync(path.join(sessionDir, 'claim'))
  const why = killed
    ? ''
    : started
      ? '; it was sampled but ended without writing the profile (it may have left a process running in the background, or been killed with SIGKILL)'
      : '; is it a Node.js program (node, or a script run by node)?'
  return new CliError(`no profile was recorded: '${opts.command}' exited with status ${status}${killed}${why}`, status === 0 ? 1 : status)
}

/** Removes the perf map our flags made, unless the user asked for one too. */
function removePerfMap(opts, pid) {
  if (!opts.perfMap) return
  const requested = /--perf-(basic-)?prof/.test(`${process.env.NODE_OPTIONS || ''} ${opts.args.join(' ')}`)
  if (requested) return
  try {
    fs.unlinkSync(`/tmp/perf-${pid}.map`)
  } catch {
    // Not there (no JIT code), or not ours to remove.
  }
}

function summary(opts, result, session) {
  const { summary: sum, reports } = result
  const lines = [`machsampler: recorded ${[opts.command, ...opts.args].join(' ')} (pid ${sum.pid})`]
  lines.push(...text.overview(sum))
  lines.push(...follow.processLines(sum, session))
  lines.push(...text.outputLines(result), '')
  if (reports.length > 0) {
    lines.push(...text.threadsTable(reports[0]), '')
    lines.push(...text.functionsTable(reports[0], 'self'), '')
    lines.push(...text.functionsTable(reports[1], 'total'), '')
  }
  lines.push(...text.costLines(sum, { inlineHint: opts.inline }))
  if (result.format !== 'machprof') {
    lines.push(`Tip: record with -o <name>.machprof to keep a file that 'machsampler report' and 'convert' read.`)
  }
  return text.printable(lines.join('\n')) + '\n'
}

/** Nothing to draw: one line, no file, and a failing status. */
function nothingRecorded(opts, result, status) {
  const sum = result.summary
  // With --duration, the sampled time is what --duration allowed, not how
  // long the program ran.
  const ran = opts.durationS !== undefined ? `was sampled for ${text.ms(sum.durationNs)} (--duration)` : `ran ${text.ms(sum.durationNs)}`
  const fix = opts.durationS !== undefined ? 'try a longer --duration or a smaller --interval' : 'try a smaller --interval'
  const what =
    sum.samples === 0
      ? `no samples: '${opts.command}' ${ran}, less than one sampling interval (${text.ms(sum.intervalNs)}); ${fix}`
      : `only idle samples (the program waited the whole time); add --idle to draw them`
  return new CliError(`${what}; nothing written to ${opts.output}`, status === 0 ? 1 : status)
}

/**
 * `--stalls`: converts what the program wrote for each stall (and each
 * hang, a stall written before it ended) to `<output>-stall-<n>.<ext>`
 * (`-hang-<n>`), and prints its summary. Returns the files written.
 */
function writeStalls(opts, sessionDir) {
  const ext = extensionOf(opts.format)
  const stem = opts.output.endsWith(`.${ext}`) ? opts.output.slice(0, -(ext.length + 1)) : opts.output
  const found = []
  for (const name of fs.readdirSync(sessionDir)) {
    // stall-<n> (one process) or stall-<pid>-<n> (following processes).
    const stall = /^stall-(?:(\d+)-)?(\d+)\.machprof$/.exec(name)
    const hang = /^machsampler-hang-(\d+)-(\d+)\.machprof$/.exec(name)
    if (stall) found.push({ kind: 'stall', pid: Number(stall[1] || 0), n: Number(stall[2]), name })
    if (hang) found.push({ kind: 'hang', pid: Number(hang[1]), n: Number(hang[2]), name })
  }
  found.sort((a, b) => a.kind.localeCompare(b.kind) || a.pid - b.pid || a.n - b.n)
  const written = []
  const counts = { stall: 0, hang: 0 }
  for (const { kind, name } of found) {
    const n = ++counts[kind]
    const output = `${stem}-${kind}-${n}.${ext}`
    let summaryText = ''
    try {
      summaryText = fs.readFileSync(path.join(sessionDir, name.replace(/\.machprof$/, '.txt')), 'utf8')
    } catch {
      // Written without its summary: the profile is what matters.
    }
    try {
      processFile(path.join(sessionDir, name), { symbols: opts.symbols, output, save: { format: opts.format, includeIdle: true }, reports: [] })
    } catch (e) {
      process.stderr.write(`machsampler: cannot write ${kind} ${n}: ${e.message}\n`)
      continue
    }
    written.push(output)
    if (!opts.quiet) {
      const what = kind === 'hang' ? `hang ${n} (the loop had not turned yet)` : `stall ${n}`
      process.stderr.write(`machsampler: ${what}: wrote ${output} (${opts.format})\n${text.printable(summaryText).replace(/\n?$/, '\n')}\n`)
    }
  }
  return written
}

/**
 * Source maps the program's processes kept in memory only (TypeScript
 * transpiled as it loaded), for naming their frames here.
 */
function noteSourceMaps(sessionDir) {
  // A checkpoint's maps (`.partial.json`) first: the final ones, a superset, replace them.
  const names = fs.readdirSync(sessionDir).filter((n) => /^source-maps-\d+(\.partial)?\.json$/.test(n))
  names.sort((a, b) => Number(b.includes('.partial')) - Number(a.includes('.partial')))
  for (const name of names) {
    try {
      for (const [script, map] of JSON.parse(fs.readFileSync(path.join(sessionDir, name), 'utf8'))) addon.sourceMaps.note(script, map)
    } catch {
      // Those functions are then shown at their compiled positions.
    }
  }
}

async function record(argv) {
  const opts = parseRecordArgs(argv)
  if (opts.help) {
    return help('record')
  }
  try {
    checkWritable(opts.output)
  } catch (e) {
    throw new CliError(e.message, 1)
  }
  if (opts.sharedOutput) {
    // Written after the program has ended: it follows the program's own
    // output there, which a reader of the profile must skip.
    process.stderr.write(`machsampler: ${opts.output} is this command's ${opts.sharedOutput.name}: the profile follows the program's own output there\n`)
  }
  const sessionDir = scratchDir()
  try {
    // The live line shares the terminal with the program: -q leaves it to
    // the program (a prompt, a REPL).
    const live = process.stderr.isTTY === true && !opts.quiet
    const stopLive = live ? liveLine(sessionDir) : () => {}
    let status
    let topPid
    // V8's log for splitting out inlined functions, where the program is node.
    const v8Log = path.join(sessionDir, 'v8.log')
    // Not when the program asks V8 for a log of its own (--prof, --log-*):
    // ours would take its place.
    const script = opts.args.findIndex((a) => !a.startsWith('-'))
    const nodeOptions = script < 0 ? opts.args : opts.args.slice(0, script)
    const ownLog = env.asksForV8Log(nodeOptions)
    const v8Flags = opts.inline && !ownLog && isNode(opts.command) ? env.v8LogFlags(opts.command, v8Log) : []
    const run = v8Flags.length > 0 ? { ...opts, args: [...v8Flags, ...opts.args], v8Log } : opts
    try {
      status = await runChild(run, childEnv(run, sessionDir, live), sessionDir, (pid) => (topPid = pid))
    } finally {
      stopLive()
    }
    // ---- stalls first: a program killed in a hang writes no profile, but
    // may have written the hang.
    if (opts.stallsMs !== undefined) writeStalls(opts, sessionDir)
    // ---- which profiles there are (one, or one per Node process) ----------
    const session = opts.follow ? await follow.collect(sessionDir, topPid) : follow.single(sessionDir)
    if (session.raws.length === 0) throw noProfile(opts, status, sessionDir)
    const reports = ['self', 'total'].map((by) => ({ top: 15, by, includeIdle: opts.includeIdle, view: opts.view }))
    // The program has exited: now symbol files may be downloaded.
    for (const raw of session.raws) await fetchFor(raw, opts.symbols, { quiet: opts.quiet })
    noteSourceMaps(sessionDir)
    const job = { symbols: opts.symbols, commands: session.commands, threadRoles: session.threadRoles }
    let result
    try {
      result = processFile(session.raws, {
        ...job,
        output: opts.output,
        save: { format: opts.format, includeIdle: opts.includeIdle, view: opts.view },
        reports: opts.quiet ? [] : reports,
      })
    } catch (e) {
      throw keepRecording(e, session.raws, job, status)
    }
    for (const p of result.summary.processes) removePerfMap(opts, p.pid)
    // With --no-jit-names, unnamed JavaScript is what was asked for.
    const asked = (w) => !opts.jitNames && /in JavaScript that has no name/.test(w)
    printWarnings({ ...result, warnings: (result.warnings || []).filter((w) => !asked(w)) })
    if (result.outputs.length === 0) throw nothingRecorded(opts, result, status)
    if (!opts.quiet) process.stderr.write(summary(opts, result, session))
    return status
  } finally {
    fs.rmSync(sessionDir, { recursive: true, force: true })
  }
}

/**
 * The program has run and its profile could not be written as asked (a
 * full disk, a directory made read-only meanwhile, a stream given several
 * processes): the recording is kept, lossless, in the current directory
 * rather than lost with the session directory. Returns the error to throw.
 */
function keepRecording(e, raws, job, status) {
  if (!(e instanceof CliError)) return e
  const kept = path.resolve(`machsampler-${timestamp()}-${process.pid}.machprof`)
  let note
  try {
    processFile(raws, { ...job, output: kept, save: { format: 'machprof' }, reports: [] })
    note = `the recording was kept in ${kept}; 'machsampler convert ${kept} -o <file>' writes it as asked`
  } catch (k) {
    note = `the recording could not be kept either (${k.message})`
  }
  // The program's status when it failed, as for any profile not written.
  return Object.assign(new CliError(`${e.message}; ${note}`, status !== 0 ? status : e.exitCode), { code: e.code })
}

module.exports = { record, parseRecordArgs }
