'use strict'
// `machsampler convert <profile.machprof> -o <file> [options]`

const fs = require('fs')
const path = require('path')

const { parse, oneProfile, CliError, USAGE } = require('./args')
const { help } = require('./help')
const { processFile, outputFormat, checkView } = require('./profile-io')
const { symbolOptions, fetchFor, printWarnings } = require('./symbols')
const { scratchDir } = require('./scratch')

const SPEC = {
  help: { type: 'boolean', short: 'h' },
  output: { type: 'string', short: 'o' },
  format: { type: 'string', short: 'f' },
  idle: { type: 'boolean' },
  view: { type: 'string' },
  'no-thread-prefix': { type: 'boolean' },
  'symbol-path': { type: 'string' },
}

async function convert(argv) {
  const { values, positionals } = parse(argv, SPEC, { command: 'convert' })
  if (values.help) return help('convert')
  const input = oneProfile('convert', positionals)
  if (values.output === undefined) throw new CliError(`convert needs -o <file>; see 'machsampler convert --help'`, USAGE)
  // `-o -`: standard output, in the format --format names.
  const toStdout = values.output === '-'
  if (toStdout && values.format === undefined) throw new CliError("-o - (standard output) needs --format; see 'machsampler convert --help'", USAGE)
  const format = outputFormat(values.output, values.format)
  const view = checkView(values.view)
  const symbols = symbolOptions(values)
  await fetchFor(input, symbols)
  const tmp = toStdout ? scratchDir() : null
  let stdoutBytes
  try {
    const output = toStdout ? path.join(tmp, 'out') : values.output
    let result
    try {
      result = processFile(input, {
        symbols,
        output,
        stream: toStdout,
        save: { format, includeIdle: values.idle === true, threadPrefix: values['no-thread-prefix'] !== true, view },
      })
    } catch (e) {
      // `-o /dev/stdout | head`: a reader that stops early, as with `-o -`.
      if (e.code === 'EPIPE') return 0
      throw e
    }
    printWarnings(result)
    if (result.outputs.length === 0) {
      const why = result.summary.samples === 0 ? 'the profile has no samples' : 'the profile has only idle samples; add --idle to draw them'
      throw new CliError(`${why}; nothing written to ${values.output}`, 1)
    }
    if (!toStdout) {
      for (const o of result.outputs) process.stderr.write(`machsampler: wrote ${o.path} (${format})\n`)
      return 0
    }
    // Read before writing: a reader that stops early ends the process on
    // EPIPE, and the directory must be gone by then. A stream gets one
    // file (see processProfileFile's `stream`).
    stdoutBytes = fs.readFileSync(result.outputs[0].path)
  } finally {
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true })
  }
  await writeStdout(stdoutBytes)
  return 0
}

/**
 * Writes `bytes` to standard output. A reader that stops early (`| head`)
 * is no error: the rest is dropped, as other command-line tools do.
 */
function writeStdout(bytes) {
  return new Promise((resolve, reject) => {
    // Kept: the stream may report the error again after the callback.
    process.stdout.on('error', () => {})
    process.stdout.write(bytes, (e) => {
      if (e && e.code !== 'EPIPE') reject(new CliError(`cannot write to standard output: ${e.message}`, 1))
      else resolve()
    })
  })
}

module.exports = { convert }
