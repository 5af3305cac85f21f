'use strict'
// Profile files for the CLI commands: one call into the addon per file
// (read, name, write, report), with the addon's coded errors turned into
// one-line CLI errors.

const addon = require('../addon.js')
const { CliError, USAGE } = require('./args')

/** An addon error (with a code and a message) as a CLI error. */
function fromAddon(e) {
  if (e && typeof e.code === 'string' && typeof e.message === 'string') return Object.assign(new CliError(e.message, 1), { code: e.code })
  return e
}

/**
 * Reads `file` and does `job` with it (see processProfileFile): names its
 * frames if it has none yet, writes `job.output`, computes `job.reports`.
 */
function processFile(file, job) {
  try {
    return addon.processProfileFile(file, { symbolicate: true, ...job })
  } catch (e) {
    throw fromAddon(e)
  }
}

/** The format to write `file` in: --format, else the extension. */
function outputFormat(file, format) {
  try {
    return format !== undefined ? addon.api.parseFormatName(format) : addon.api.formatFromPath(file)
  } catch (e) {
    throw new CliError(e.message, USAGE)
  }
}

/** The usual file-name ending of a format. */
function extensionOf(format) {
  const f = addon.api.formats().find((x) => x.name === format)
  return f.extensions[0].replace(/^\./, '')
}

const VIEWS = ['mixed', 'js', 'native']

/** --view: mixed (default), js or native. */
function checkView(view) {
  if (view === undefined || VIEWS.includes(view)) return view
  throw new CliError(`--view must be one of ${VIEWS.join(', ')}, got '${view}'`, USAGE)
}

module.exports = { processFile, outputFormat, extensionOf, fromAddon, checkView }
