'use strict'
// `machsampler report <profile.machprof> [options]`

const { parse, number, oneProfile, CliError, USAGE } = require('./args')
const { help } = require('./help')
const { processFile, checkView } = require('./profile-io')
const { symbolOptions, fetchFor, printWarnings } = require('./symbols')
const text = require('./text')

const SPEC = {
  help: { type: 'boolean', short: 'h' },
  thread: { type: 'string' },
  top: { type: 'string' },
  by: { type: 'string' },
  idle: { type: 'boolean' },
  view: { type: 'string' },
  'symbol-path': { type: 'string' },
}

function checkReportOptions(options) {
  if (options.top !== undefined && !(Number.isInteger(options.top) && options.top >= 1 && options.top <= 100000)) {
    throw new CliError(`--top must be an integer from 1 to 100000`, USAGE)
  }
  if (options.by !== undefined && options.by !== 'self' && options.by !== 'total') {
    throw new CliError(`--by must be 'self' or 'total', got '${options.by}'`, USAGE)
  }
}

async function report(argv) {
  const { values, positionals } = parse(argv, SPEC, { command: 'report' })
  if (values.help) return help('report')
  const input = oneProfile('report', positionals)
  const options = {
    thread: values.thread,
    top: number(values, 'top'),
    by: values.by,
    includeIdle: values.idle === true,
    view: checkView(values.view),
  }
  checkReportOptions(options)
  for (const k of Object.keys(options)) if (options[k] === undefined) delete options[k]
  const symbols = symbolOptions(values)
  await fetchFor(input, symbols)
  const result = processFile(input, { symbols, reports: [options] })
  printWarnings(result)
  const { summary, reports } = result
  const [r] = reports
  const lines = [`machsampler report: ${input}`, ...text.overview(summary), '']
  lines.push(...text.threadsTable(r), '')
  lines.push(...text.functionsTable(r, options.by, options.thread, options.view), '')
  lines.push(...text.pathsTable(r), '')
  lines.push(...text.costLines(summary))
  process.stdout.write(text.printable(lines.join('\n')) + '\n')
  return 0
}

module.exports = { report }
