'use strict'
// Grandchildren: Node programs a scenario starts (lifecycle, coexistence,
// CLI, real suite). The scenario's own event loop stays free while they
// run, so it keeps the watchdog fed; the grandchild's time limit is what
// declares it hung.

const { spawn } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { progress } = require('./child')

const ROOT = path.join(__dirname, '..', '..')
const ADDON = ROOT // require(ADDON) loads the package's index.js

function tmpdir(tag) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `machsampler-stress-${tag}-`))
}

/**
 * Runs `cmd args` to completion. Resolves { code, signal, stdout, stderr,
 * ms, timedOut }. With `timeoutMs`, a process still running is killed
 * (SIGKILL, whole group) and `timedOut` is set: the caller counts a hang.
 */
function run(cmd, args, { env = {}, cwd = ROOT, timeoutMs = 60000, input, note } = {}) {
  return new Promise((resolve) => {
    const started = Date.now()
    const child = spawn(cmd, args, {
      cwd,
      env: { ...process.env, ...env },
      stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      detached: true,
    })
    if (input !== undefined) child.stdin.end(input)
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => {
      if (stdout.length < 8 << 20) stdout += d
    })
    child.stderr.on('data', (d) => {
      if (stderr.length < 8 << 20) stderr += d
    })
    let timedOut = false
    const beat = setInterval(() => progress(note || `waiting for ${path.basename(cmd)}`), 500)
    const timer = setTimeout(() => {
      timedOut = true
      try {
        process.kill(-child.pid, 'SIGKILL')
      } catch {}
    }, timeoutMs)
    child.on('error', (e) => {
      stderr += String(e)
    })
    child.on('close', (code, signal) => {
      clearInterval(beat)
      clearTimeout(timer)
      resolve({ code, signal, stdout, stderr, ms: Date.now() - started, timedOut })
    })
  })
}

/** Runs a Node program given as source text (written to a temp file). */
function runNode(src, opts = {}) {
  const dir = opts.dir || tmpdir('prog')
  const file = path.join(dir, opts.name || 'prog.js')
  fs.writeFileSync(file, src)
  const node = opts.node || process.execPath
  return run(node, [...(opts.nodeArgs || []), file, ...(opts.args || [])], { cwd: dir, ...opts }).then((r) => {
    if (!opts.dir) fs.rmSync(dir, { recursive: true, force: true })
    return r
  })
}

/** A short description of a process result, for wrong-result messages. */
function describe(r) {
  const tail = (s) => s.trim().split('\n').slice(-6).join(' | ').slice(0, 600)
  return `exit ${r.code} signal ${r.signal}${r.timedOut ? ' (timed out)' : ''}, stderr: ${tail(r.stderr)}`
}

module.exports = { run, runNode, describe, tmpdir, ROOT, ADDON }
