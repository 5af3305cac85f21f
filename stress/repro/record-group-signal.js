'use strict'
// Reproducer: `machsampler record` delivered a group-wide signal twice.
//
// A program that exits gracefully (0) on its first SIGINT and forcibly
// (130) on its second exited 130 under `record` after `kill -INT -<pgid>`,
// and 0 without it: the program got the signal from the kill, and again
// from `record` forwarding it. Likewise with SIGTERM as `timeout` sends it.
// Now `record` forwards only what the program did not get itself; a
// signal sent to `record` alone still reaches the program, once.
//
//   node stress/repro/record-group-signal.js   exit 1 if reproduced

const { spawn } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { ROOT, verdict } = require('./lib')

const PROGRAM = `let n = 0
for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => { if (++n > 1) process.exit(130); setTimeout(() => process.exit(0), 300) })
setInterval(() => {}, 1000)
// Some CPU first, so the profile has samples and record passes the status on.
const end = Date.now() + 100; while (Date.now() < end);
process.stdout.write('ready\\n')`

function run(signal, toGroup) {
  return new Promise((resolve) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-sig-'))
    const prog = path.join(dir, 'prog.js')
    fs.writeFileSync(prog, PROGRAM)
    const cli = spawn(process.execPath, [path.join(ROOT, 'bin', 'machsampler.js'), 'record', '-q', '-o', path.join(dir, 'p.collapsed'), '--', process.execPath, prog], {
      detached: true, // its own process group, with the program
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let sent = false
    cli.stdout.on('data', (d) => {
      out += d
      if (!sent && out.includes('ready')) {
        sent = true
        setTimeout(() => process.kill(toGroup ? -cli.pid : cli.pid, signal), 100)
      }
    })
    let err = ''
    cli.stderr.on('data', (d) => (err += d))
    const timer = setTimeout(() => process.kill(-cli.pid, 'SIGKILL'), 20000)
    cli.on('exit', (code, sig) => {
      clearTimeout(timer)
      fs.rmSync(dir, { recursive: true, force: true })
      resolve({ code, sig, err })
    })
  })
}

;(async () => {
  const problems = []
  const seen = []
  for (const [signal, toGroup] of [
    ['SIGINT', true],
    ['SIGTERM', true],
    ['SIGINT', false],
    ['SIGTERM', false],
  ]) {
    const r = await run(signal, toGroup)
    seen.push(`${signal} to ${toGroup ? 'the group' : 'record'}: exit ${r.code}`)
    if (r.code !== 0) problems.push(`${signal} to ${toGroup ? 'the group' : 'record alone'}: exit ${r.code} signal ${r.sig} ${r.err.trim().slice(-200)}`)
  }
  verdict(problems.length > 0, problems.length ? problems.join('; ') : seen.join('; '))
})()
