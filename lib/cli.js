'use strict'
// `machsampler <command>`: record, report, convert. Every failure is one
// line on stderr and a conventional exit status: 2 for bad usage, 1 for a
// failure (unreadable input, unwritable output), 126/127 for a command
// that cannot be run, and otherwise the profiled program's own status.
// No stack traces, except with MACHSAMPLER_DEBUG=1 for our own bugs.

const { parse, number, CliError, USAGE } = require('./args')
const text = require('./text')

const FORMATS_HELP = `Formats, by extension or --format:
  .html (html, flamegraph)  flame graph page with search and zoom
  .svg (svg)                the same flame graph as an SVG
  .machprof (machprof)      lossless; what 'report' and 'convert' read
  .pb.gz, .pprof (pprof)    go tool pprof, and profilers that read pprof
  .speedscope.json          speedscope (one profile per thread)
  .fxprof.json (firefox)    Firefox Profiler (profiler.firefox.com)
  .cpuprofile               Chrome DevTools / VS Code (main thread)
  .collapsed, .folded       folded stacks for flamegraph.pl / inferno`

const USAGE_TEXT = `Usage: machsampler <command> [options]

Samples the native stacks of every thread of a Node.js program: the main
thread, worker_threads, libuv's pool, V8's helpers and other addons.

Commands:
  record [options] -- <command> [args...]  run a Node.js program and profile it
  report <profile> [options]               hot functions and call paths
  convert <profile> -o <file> [options]    write a profile in another format

Run 'machsampler <command> --help' for a command's options.

${FORMATS_HELP}
`

const HELP = {
  record: `Usage: machsampler record [options] -- <command> [args...]

Runs <command>, a Node.js program (for example: node app.js), with the
sampler preloaded through NODE_OPTIONS, and writes the profile when it
exits: normally, by process.exit(), an uncaught exception, SIGINT, SIGTERM
or SIGHUP. Prints a summary on stderr.

Options:
  -o, --output <file>   the profile to write; its extension picks the format
                        (default: machsampler-<date>-<time>.html here)
  -f, --format <name>   the format, whatever the extension
      --interval <ms>   sampling interval: an integer from 1 to 1000 (default 10)
      --depth <n>       frames kept per stack: 1 to 1024 (default 128)
      --duration <s>    stop sampling after <s> seconds (the program runs on)
      --no-jit-names    do not name JavaScript frames (they stay 0x...)
      --perf-map        also name them from V8's perf map (adds
                        --perf-basic-prof-only-functions to the program)
      --idle            count idle samples in the summary and flame graphs
  -q, --quiet           no summary
  -h, --help            this help

Exit status: the program's own (128+n if it died of signal n); 1 if no
profile could be written; 2 for bad usage; 126 or 127 if the command could
not be run.

${FORMATS_HELP}
`,
  report: `Usage: machsampler report <profile.machprof> [options]

Prints the threads, the hottest functions and the hottest call paths of a
profile. Idle samples are left out unless --idle is given.

Options:
      --thread <name|tid>  only threads with this name (all of them) or tid
      --top <n>            rows per table (default 15)
      --by <self|total>    sort functions by self or total samples (default self)
      --idle               count idle samples too
  -h, --help               this help
`,
  convert: `Usage: machsampler convert <profile.machprof> -o <file> [options]

Writes a .machprof profile in another format (or again as .machprof).

Options:
  -o, --output <file>   the file to write; its extension picks the format
  -f, --format <name>   the format, whatever the extension
      --idle            keep idle samples in flame graphs and collapsed stacks
      --no-thread-prefix  merge threads in flame graphs and collapsed stacks
  -h, --help            this help

${FORMATS_HELP}
`,
}

const HELP_OPTION = { help: { type: 'boolean', short: 'h' } }

function binding() {
  return require('../binding.js')
}

/** An addon error (with a code and a message) as a CLI error. */
function fromAddon(e) {
  if (e && typeof e.code === 'string' && typeof e.message === 'string') return new CliError(e.message, 1)
  return e
}

/**
 * Reads a profile for report and convert. A profile saved without names
 * is symbolicated if it was recorded on this kind of system (the module
 * files are probably still there); otherwise frames stay addresses.
 */
function loadInput(file) {
  const ms = binding()
  let profile
  try {
    profile = ms.loadProfile(file)
  } catch (e) {
    throw fromAddon(e)
  }
  if (!profile.symbols && profile.meta.platform === process.platform) {
    try {
      profile.symbols = ms.symbolicate(profile)
    } catch {
      // Names are a bonus here; addresses still make a valid report.
    }
  }
  return profile
}

/** The format to write `file` in: --format, else the extension. */
function outputFormat(file, format) {
  const ms = binding()
  try {
    return format !== undefined ? ms.parseFormatName(format) : ms.formatFromPath(file)
  } catch (e) {
    throw new CliError(e.message, USAGE)
  }
}

/** The one input profile report and convert take. */
function oneProfile(command, positionals) {
  if (positionals.length === 1) return positionals[0]
  const what = positionals.length === 0 ? 'needs a profile file' : `takes one profile, got ${positionals.length}`
  throw new CliError(`${command} ${what}`, USAGE)
}

function reportCommand(argv) {
  const { values, positionals } = parse(
    argv,
    {
      ...HELP_OPTION,
      thread: { type: 'string' },
      top: { type: 'string' },
      by: { type: 'string' },
      idle: { type: 'boolean' },
    },
    { command: 'report' },
  )
  if (values.help) return help('report')
  const input = oneProfile('report', positionals)
  const top = number(values, 'top')
  const options = { thread: values.thread, top, by: values.by, includeIdle: values.idle === true }
  checkReportOptions(options)
  const profile = loadInput(input)
  const report = runReport(profile, options)
  const lines = [`machsampler report: ${input}`, ...text.overview(profile), '']
  lines.push(...text.threadsTable(report), '')
  lines.push(...text.functionsTable(report, options.by, options.thread), '')
  lines.push(...text.pathsTable(report))
  process.stdout.write(lines.join('\n') + '\n')
  return 0
}

function checkReportOptions(options) {
  if (options.top !== undefined && !(Number.isInteger(options.top) && options.top >= 1 && options.top <= 100000)) {
    throw new CliError(`--top must be an integer from 1 to 100000`, USAGE)
  }
  if (options.by !== undefined && options.by !== 'self' && options.by !== 'total') {
    throw new CliError(`--by must be 'self' or 'total', got '${options.by}'`, USAGE)
  }
}

function runReport(profile, options) {
  try {
    return binding().profileReport(profile, options)
  } catch (e) {
    throw fromAddon(e)
  }
}

function convertCommand(argv) {
  const { values, positionals } = parse(
    argv,
    {
      ...HELP_OPTION,
      output: { type: 'string', short: 'o' },
      format: { type: 'string', short: 'f' },
      idle: { type: 'boolean' },
      'no-thread-prefix': { type: 'boolean' },
    },
    { command: 'convert' },
  )
  if (values.help) return help('convert')
  const input = oneProfile('convert', positionals)
  if (values.output === undefined) throw new CliError(`convert needs -o <file>; see 'machsampler convert --help'`, USAGE)
  const format = outputFormat(values.output, values.format)
  const profile = loadInput(input)
  save(profile, values.output, {
    format,
    includeIdle: values.idle === true,
    threadPrefix: values['no-thread-prefix'] !== true,
  })
  process.stderr.write(`machsampler: wrote ${values.output} (${format})\n`)
  return 0
}

/** Saves atomically; a failure leaves nothing behind and is one line. */
function save(profile, file, options) {
  try {
    return binding().saveProfile(profile, file, options)
  } catch (e) {
    throw fromAddon(e)
  }
}

function help(command) {
  process.stdout.write(command ? HELP[command] : USAGE_TEXT)
  return 0
}

const COMMANDS = {
  record: (argv) => require('./record').record(argv),
  report: reportCommand,
  convert: convertCommand,
}

function run(argv) {
  const [command, ...rest] = argv
  if (command === undefined) {
    process.stderr.write(USAGE_TEXT)
    return Promise.resolve(USAGE)
  }
  if (command === '-h' || command === '--help' || command === 'help') {
    return Promise.resolve(help(HELP[rest[0]] ? rest[0] : undefined))
  }
  if (command === '-v' || command === '--version') {
    process.stdout.write(require('../package.json').version + '\n')
    return Promise.resolve(0)
  }
  const fn = COMMANDS[command]
  if (!fn) {
    const what = command.startsWith('-') ? `unknown option '${command}'` : `unknown command '${command}'`
    return Promise.resolve(fail(new CliError(`${what}; commands are record, report, convert (see 'machsampler --help')`, USAGE)))
  }
  return Promise.resolve()
    .then(() => fn(rest))
    .catch(fail)
}

/** One line on stderr; the exit status to use. */
function fail(e) {
  if (e instanceof CliError) {
    process.stderr.write(`machsampler: ${oneLine(e.message)}\n`)
    return e.exitCode
  }
  if (process.env.MACHSAMPLER_DEBUG === '1') process.stderr.write(`${e && e.stack}\n`)
  process.stderr.write(`machsampler: internal error: ${oneLine(String((e && e.message) || e))}\n`)
  return 1
}

function oneLine(s) {
  return s.replace(/\s*\n\s*/g, ' ')
}

/** Entry point of bin/machsampler.js. */
function main(argv) {
  run(argv).then((code) => {
    process.exitCode = code
  })
}

module.exports = { main, run, HELP, outputFormat, save, fromAddon, runReport, CliError, USAGE, fail }
