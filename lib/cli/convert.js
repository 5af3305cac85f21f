'use strict'
// `machsampler convert <profile.machprof> -o <file> [options]`

const { parse, oneProfile, CliError, USAGE } = require('./args')
const { help } = require('./help')
const { processFile, outputFormat, checkView } = require('./profile-io')
const { symbolOptions, fetchFor, printWarnings } = require('./symbols')

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
  const format = outputFormat(values.output, values.format)
  const view = checkView(values.view)
  const symbols = symbolOptions(values)
  await fetchFor(input, symbols)
  const result = processFile(input, {
    symbols,
    output: values.output,
    save: { format, includeIdle: values.idle === true, threadPrefix: values['no-thread-prefix'] !== true, view },
  })
  printWarnings(result)
  if (result.outputs.length === 0) {
    const why = result.summary.samples === 0 ? 'the profile has no samples' : 'the profile has only idle samples; add --idle to draw them'
    throw new CliError(`${why}; nothing written to ${values.output}`, 1)
  }
  for (const o of result.outputs) process.stderr.write(`machsampler: wrote ${o.path} (${format})\n`)
  return 0
}

module.exports = { convert }
