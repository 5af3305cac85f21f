'use strict'
// `machsampler <command>`: dispatches to record, report, convert. Every
// failure is one line on stderr and a conventional exit status: 2 for bad
// usage, 1 for a failure (unreadable input, unwritable output), 126/127
// for a command that cannot be run, and otherwise the profiled program's
// own status. No stack traces, except with MACHSAMPLER_DEBUG=1 for our own
// bugs.

const { CliError, USAGE } = require('./args')
const { help, usage, hasHelp } = require('./help')

const COMMANDS = {
  record: (argv) => require('./record').record(argv),
  report: (argv) => require('./report').report(argv),
  convert: (argv) => require('./convert').convert(argv),
}

function run(argv) {
  const [command, ...rest] = argv
  if (command === undefined) {
    process.stderr.write(usage())
    return Promise.resolve(USAGE)
  }
  if (command === '-h' || command === '--help' || command === 'help') {
    return Promise.resolve(help(hasHelp(rest[0]) ? rest[0] : undefined))
  }
  if (command === '-v' || command === '--version') {
    process.stdout.write(require('../../package.json').version + '\n')
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
  // No addon for this platform: its message says why and what to do.
  if (e && e.code === 'ERR_MACHSAMPLER_UNSUPPORTED_PLATFORM') {
    process.stderr.write(`${oneLine(e.message)}\n`)
    return 1
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
  // A reader that stops early (`report … | head`) closes the pipe: end
  // quietly, as other command-line tools do, instead of with a stack trace.
  process.stdout.on('error', (e) => {
    if (e.code !== 'EPIPE') throw e
    process.exit(0)
  })
  // Messages go to stderr; a terminal closed meanwhile (EIO after SIGHUP)
  // must not stop `record` from writing the profile.
  process.stderr.on('error', () => {})
  run(argv).then((code) => {
    process.exitCode = code
  })
}

module.exports = { main, run }
