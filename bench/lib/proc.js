'use strict'
// Running the workloads: each configuration in a process of its own, with
// its result as the last JSON line of stdout.
const { spawnSync, execFileSync } = require('child_process')
const fs = require('fs')
const path = require('path')

const ROOT = path.join(__dirname, '..', '..')
const WL = path.join(__dirname, '..', 'workloads')

/** Runs `node [nodeArgs] script [args]` (optionally under `wrap`); returns its JSON line. */
function runNode(script, { env = {}, nodeArgs = [], args = [], wrap = null, node = process.execPath, timeoutMs = 600000 } = {}) {
  const cmd = wrap ? wrap[0] : node
  const argv = wrap ? [...wrap.slice(1), node, ...nodeArgs, script, ...args] : [...nodeArgs, script, ...args]
  const r = spawnSync(cmd, argv, { env: { ...process.env, ...env }, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 << 20 })
  if (r.status !== 0) throw new Error(`${cmd} ${argv.join(' ')} failed (${r.status} ${r.signal}): ${(r.stderr || '').slice(-2000)}`)
  return JSON.parse(r.stdout.trim().split('\n').pop())
}

/** Runs a workload that takes its options as one JSON argument. */
function runJson(script, arg, opts = {}) {
  return runNode(script, { ...opts, args: [JSON.stringify(arg)] })
}

/** The first line of `cmd argv`'s output, or null when it is missing. */
function tool(cmd, argv) {
  try {
    return execFileSync(cmd, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim().split('\n')[0]
  } catch {
    return null
  }
}

/** true, or why `perf record` cannot run here. */
function perfWorks(tmp) {
  const out = path.join(tmp, 'probe.data')
  const r = spawnSync('perf', ['record', '-F', '1000', '-g', '-o', out, '--', 'true'], { encoding: 'utf8' })
  return r.status === 0 ? true : (r.stderr || r.error?.message || 'perf failed').trim().split('\n').pop()
}

/** The node binary of another major (scripts/fetch-node.js), or null when it cannot be had. */
function nodeOfMajor(major) {
  if (Number(process.versions.node.split('.')[0]) === major) return process.execPath
  try {
    return require(path.join(ROOT, 'scripts', 'fetch-node.js')).fetchNode(major)
  } catch {
    return null
  }
}

/** Native threads started by an LD_PRELOAD constructor (stress/repro/native-threads.c). */
function nativeThreadsEnv(what) {
  const { nativeThreads } = require(path.join(ROOT, 'stress', 'repro', 'lib.js'))
  return { LD_PRELOAD: nativeThreads(), MACHSAMPLER_REPRO: what, MACHSAMPLER_REPRO_OUT: '/dev/null' }
}

function writeScript(tmp, name, text) {
  const file = path.join(tmp, name)
  fs.writeFileSync(file, text)
  return file
}

module.exports = { ROOT, WL, runNode, runJson, tool, perfWorks, nodeOfMajor, nativeThreadsEnv, writeScript }
