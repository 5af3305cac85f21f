'use strict'
const { spawnSync } = require('child_process')
const path = require('path')

const SCENARIO = path.join(__dirname, 'fixtures', 'scenario.js')

/** Runs a scenario in a fresh node process and returns its JSON summary. */
function scenario(name, options = {}, { env = {}, node = process.execPath, nodeArgs = [], timeoutMs = 60000 } = {}) {
  const r = spawnSync(node, [...nodeArgs, SCENARIO, name, JSON.stringify(options)], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: timeoutMs,
    maxBuffer: 64 << 20,
  })
  if (r.status !== 0) {
    throw new Error(`scenario ${name} failed: status ${r.status} signal ${r.signal}\n${r.stderr}`)
  }
  return JSON.parse(r.stdout)
}

/** Runs a scenario and returns the raw process result (for crash tests). */
function scenarioRaw(name, options = {}, { env = {}, node = process.execPath, timeoutMs = 60000 } = {}) {
  return spawnSync(node, [SCENARIO, name, JSON.stringify(options)], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: timeoutMs,
  })
}

module.exports = { scenario, scenarioRaw, SCENARIO }
