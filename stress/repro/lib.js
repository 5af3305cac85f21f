'use strict'
// Shared by the reproducers: the native-thread preload (native-threads.c,
// built with gcc on first use), Node binaries of other majors, and the
// verdict line the stress suite reads ("REPRODUCED: ..." or "not
// reproduced: ...").

const { execFileSync, spawnSync } = require('child_process')
const crypto = require('crypto')
const fs = require('fs')
const os = require('os')
const path = require('path')

const ROOT = path.join(__dirname, '..', '..')

/** The preload library, compiled once per source version. */
function nativeThreads() {
  const src = path.join(__dirname, 'native-threads.c')
  const hash = crypto.createHash('sha256').update(fs.readFileSync(src)).digest('hex').slice(0, 12)
  const dir = path.join(ROOT, '.cache', 'repro')
  const so = path.join(dir, `native-threads-${hash}.so`)
  if (!fs.existsSync(so)) {
    fs.mkdirSync(dir, { recursive: true })
    const tmp = `${so}.${process.pid}.tmp`
    execFileSync('gcc', ['-O1', '-g', '-fPIC', '-shared', '-pthread', '-o', tmp, src])
    fs.renameSync(tmp, so)
  }
  return so
}

/** Runs `node args` with native threads doing `what`; returns the run and their report. */
function withNativeThreads(what, node, args, opts = {}) {
  const out = path.join(os.tmpdir(), `machsampler-repro-${process.pid}-${Date.now()}.txt`)
  const env = { ...process.env, ...opts.env, LD_PRELOAD: nativeThreads(), MACHSAMPLER_REPRO: what, MACHSAMPLER_REPRO_OUT: out }
  const r = spawnSync(node, args, { encoding: 'utf8', timeout: opts.timeout ?? 60000, env, input: opts.input })
  let report = {}
  try {
    report = Object.fromEntries(
      fs
        .readFileSync(out, 'utf8')
        .trim()
        .split('\n')
        .map((l) => l.split(' '))
        .map(([k, v]) => [k, Number(v)]),
    )
    fs.unlinkSync(out)
  } catch {
    // No report: the process died before exit.
  }
  return { ...r, report }
}

/** Node binaries for the majors given that are cached (scripts/fetch-node.js), this one first. */
function nodes(majors = [18, 20, 22, 24, 26]) {
  const out = [{ major: Number(process.versions.node.split('.')[0]), bin: process.execPath }]
  for (const m of majors) {
    const bin = path.join(ROOT, '.cache', 'node', String(m), 'bin', 'node')
    if (fs.existsSync(bin) && !out.some((n) => n.major === m)) out.push({ major: m, bin })
  }
  return out
}

/** Prints the verdict and sets the exit status: 1 if reproduced. */
function verdict(reproduced, what) {
  console.log(reproduced ? `REPRODUCED: ${what}` : `not reproduced: ${what}`)
  if (reproduced) process.exitCode = 1
}

/** `node -e` of the addon at ROOT: a script that loads it as `ms`. */
function addonScript(body) {
  return `const ms = require(${JSON.stringify(ROOT)}); ${body}`
}

module.exports = { ROOT, nativeThreads, withNativeThreads, nodes, verdict, addonScript, spawnSync, execFileSync }
