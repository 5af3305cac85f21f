'use strict'
// --symbol-path for record, report and convert: download what the symbol
// servers have for the profile's modules (after the program has exited;
// with a progress line on a terminal), then hand the symbol path to the
// symbolization in processProfileFile.

const addon = require('../addon.js')
const env = require('../env.js')
const { downloadAll, describe } = require('../symbol-fetch.js')
const { CliError, USAGE } = require('./args')
const { fromAddon } = require('./profile-io')
const { printable } = require('./text')

/**
 * The symbols job option: --symbol-path, else MACHSAMPLER_SYMBOL_PATH, else
 * none. Checked here, before a program is run for nothing.
 */
function symbolOptions(values) {
  const flag = values['symbol-path'] !== undefined
  const entries = flag ? values['symbol-path'] : env.symbolPath(process.env)
  if (entries === undefined) return {}
  for (const e of entries.split(';').map((s) => s.trim())) {
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(e) && !/^https?:\/\/[^/]/i.test(e)) {
      const where = flag ? '--symbol-path' : 'MACHSAMPLER_SYMBOL_PATH'
      throw new CliError(`${where}: '${e}' is neither a directory nor an http:// or https:// symbol server`, USAGE)
    }
  }
  return { symbolPath: entries }
}

/**
 * Downloads the symbol files `file` (a .machprof) needs from the servers on
 * the symbol path. Problems are printed, once each, and never fail the
 * command: those names stay unknown.
 */
async function fetchFor(file, symbols, { quiet = false } = {}) {
  if (symbols.symbolPath === undefined) return
  let list
  try {
    list = addon.symbolDownloads(file, symbols)
  } catch (e) {
    // An unreadable or corrupt profile: the same one-line error as without
    // --symbol-path.
    throw fromAddon(e)
  }
  if (list.length === 0) return
  const tty = process.stderr.isTTY === true && !quiet
  const progress = tty
    ? (done, total) => process.stderr.write(`\r\x1b[2Kmachsampler: symbol files ${done}/${total}`)
    : undefined
  const result = await downloadAll(list, { progress })
  if (tty) process.stderr.write('\r\x1b[2K')
  if (!quiet) {
    const got = `machsampler: symbol servers: ${result.downloaded} downloaded, ${result.missing} not on the server`
    process.stderr.write(`${got}${result.failed.length ? `, ${result.failed.length} failed` : ''}\n`)
  }
  for (const line of describe(result)) process.stderr.write(`machsampler: ${line}\n`)
}

/**
 * Symbolization warnings (a corrupt symbol file, a broken source map), once
 * each. Scripts that name a source map that is not there are common in
 * published packages (npm's own): those are one line, not one per script.
 */
function printWarnings(result) {
  const missing = []
  for (const w of result.warnings || []) {
    if (/^source map .*: No such file or directory/.test(w)) missing.push(w)
    else process.stderr.write(`machsampler: ${printable(w)}\n`)
  }
  if (missing.length === 1) process.stderr.write(`machsampler: ${printable(missing[0])}\n`)
  else if (missing.length > 1) {
    const first = /^source map (.*?): No such file/.exec(missing[0])[1]
    process.stderr.write(
      `machsampler: ${missing.length} scripts name source maps that are not there (first: ${printable(first)}); ` +
        'their functions are shown at their compiled positions\n',
    )
  }
}

module.exports = { symbolOptions, fetchFor, printWarnings }
