'use strict'
// A small command-line parser. util.parseArgs would do most of it, but its
// messages are long and its `--no-…` handling differs; the CLI wants
// one-line errors that name the command's --help.

/** An error the CLI reports as one line, exiting with `exitCode`. */
class CliError extends Error {
  constructor(message, exitCode = 1) {
    super(message)
    this.exitCode = exitCode
  }
}

/** Exit code of usage errors (bad options), as getopt-based tools use. */
const USAGE = 2

/**
 * Parses `argv` against `spec`: `{ name: { type: 'string' | 'boolean', short } }`.
 * Options may come as `--name value`, `--name=value`, `-o value`; `--`
 * ends the options. With `stopAtCommand`, the first positional argument
 * also ends them (it and everything after are the command to run), so the
 * command's own options are never taken for ours.
 *
 * Returns `{ values, positionals, dashDash }`; `dashDash` is true if `--`
 * was given.
 */
function parse(argv, spec, { command, stopAtCommand = false } = {}) {
  const help = `see 'machsampler ${command} --help'`
  const shorts = {}
  for (const [name, s] of Object.entries(spec)) if (s.short) shorts[s.short] = name
  const values = {}
  const positionals = []
  let dashDash = false
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (arg === '--') {
      dashDash = true
      positionals.push(...argv.slice(i + 1))
      break
    }
    let name
    let inline
    if (arg.startsWith('--')) {
      const eq = arg.indexOf('=')
      name = eq < 0 ? arg.slice(2) : arg.slice(2, eq)
      inline = eq < 0 ? undefined : arg.slice(eq + 1)
    } else if (arg.length > 1 && arg.startsWith('-') && !/^-\d/.test(arg)) {
      name = shorts[arg.slice(1, 2)]
      if (name === undefined) throw new CliError(`unknown option '${arg}'; ${help}`, USAGE)
      inline = arg.length > 2 ? arg.slice(2) : undefined
    } else {
      positionals.push(arg)
      if (stopAtCommand) {
        positionals.push(...argv.slice(i + 1))
        break
      }
      continue
    }
    const s = spec[name]
    if (!s) throw new CliError(`unknown option '${arg.split('=')[0]}'; ${help}`, USAGE)
    if (s.type === 'boolean') {
      if (inline !== undefined) throw new CliError(`option '--${name}' takes no value`, USAGE)
      values[name] = true
      continue
    }
    let value = inline
    if (value === undefined) {
      // `--interval -- node app.js`: the value is missing, not '--'.
      if (i + 1 >= argv.length || argv[i + 1] === '--') throw new CliError(`option '--${name}' needs a value; ${help}`, USAGE)
      value = argv[++i]
    }
    // Each option holds one value: a second one would silently win.
    if (values[name] !== undefined && values[name] !== value) {
      throw new CliError(`option '--${name}' given twice ('${values[name]}', '${value}'): give it once; ${help}`, USAGE)
    }
    values[name] = value
  }
  return { values, positionals, dashDash }
}

/**
 * A numeric option's value, or undefined if absent. Only decimal numbers
 * ('10', '2.5'): not '0x10' or '1e2', which Number() would take. The
 * range is checked by whoever uses the value.
 */
function number(values, name) {
  const v = values[name]
  if (v === undefined) return undefined
  if (!/^[+-]?(\d+(\.\d*)?|\.\d+)$/.test(v.trim())) throw new CliError(`option '--${name}' takes a decimal number, got '${v}'`, USAGE)
  return Number(v)
}

/** The one input profile `report` and `convert` take. */
function oneProfile(command, positionals) {
  if (positionals.length === 1) return positionals[0]
  const what = positionals.length === 0 ? 'needs a profile file' : `takes one profile, got ${positionals.length}`
  throw new CliError(`${command} ${what}`, USAGE)
}

module.exports = { parse, number, oneProfile, CliError, USAGE }
