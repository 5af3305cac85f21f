'use strict'
// A real test suite, untouched: qs (the query-string parser under
// Express, ~500 M downloads a month) ships its tape suite in the npm
// tarball. It is installed once into .cache/stress/ (the tarball from the
// registry, plus the test files' own dependencies at the versions qs's
// devDependencies ask for), then run:
// - without the sampler (the reference), and
// - with the sampler preloaded at 1 kHz the way users preload it
//   (NODE_OPTIONS="--require register.js", MACHSAMPLER_INTERVAL_MS=1),
//   several times, alternating MACHSAMPLER_MODE=cpu and wall, and once
//   under `machsampler record --interval 1` in the mode after them.
// Every run must report the same assertions with the same ok / not ok,
// and each sampled run must leave a profile with samples (counted by
// weight) that is consistent with its mode.

const fs = require('fs')
const path = require('path')
const { main, progress } = require('../lib/child')
const { run, describe, tmpdir, ROOT } = require('../lib/proc')
const { checkProfile, weightSum } = require('../lib/check')

const MODES = ['cpu', 'wall']

const PACKAGE = 'qs'
const VERSION = '6.14.0'
const CACHE = path.join(ROOT, '.cache', 'stress', `${PACKAGE}-${VERSION}`)
const PKG = path.join(CACHE, 'package')
const BUILTINS = new Set(require('module').builtinModules)

async function install(c) {
  if (fs.existsSync(path.join(CACHE, '.ready'))) return true
  fs.rmSync(CACHE, { recursive: true, force: true })
  fs.mkdirSync(CACHE, { recursive: true })
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm'
  const pack = await run(npm, ['pack', `${PACKAGE}@${VERSION}`, '--silent'], { cwd: CACHE, timeoutMs: 170000, note: 'npm pack' })
  if (!c.ok(pack.code === 0, `npm pack ${PACKAGE}@${VERSION}: ${describe(pack)}`)) return false
  const tgz = pack.stdout.trim().split('\n').pop()
  const tar = await run('tar', ['xzf', tgz], { cwd: CACHE })
  if (!c.ok(tar.code === 0, `tar: ${describe(tar)}`)) return false
  // The packages the test files require, at qs's own devDependency ranges.
  const pkg = JSON.parse(fs.readFileSync(path.join(PKG, 'package.json'), 'utf8'))
  const needed = new Set()
  for (const f of fs.readdirSync(path.join(PKG, 'test'))) {
    const src = fs.readFileSync(path.join(PKG, 'test', f), 'utf8')
    for (const m of src.matchAll(/require\(['"]([^'".][^'"]*)['"]\)/g)) {
      const name = m[1].startsWith('@') ? m[1].split('/').slice(0, 2).join('/') : m[1].split('/')[0]
      if (!BUILTINS.has(name) && !name.startsWith('node:')) needed.add(name)
    }
  }
  const specs = [...needed].map((n) => `${n}@${(pkg.devDependencies || {})[n] || (pkg.dependencies || {})[n] || 'latest'}`)
  // And the dependencies of qs itself (side-channel, ...): one install, as
  // a second one would prune what the first added.
  for (const [n, v] of Object.entries(pkg.dependencies || {})) specs.push(`${n}@${v}`)
  // Installed next to the package, not inside it (its package.json lists
  // build tools the tests do not need); Node finds them one level up.
  fs.writeFileSync(path.join(CACHE, 'package.json'), '{ "private": true }\n')
  const inst = await run(npm, ['install', '--no-save', '--no-package-lock', '--ignore-scripts', '--no-audit', '--no-fund', ...specs], {
    cwd: CACHE,
    timeoutMs: 170000,
    note: 'npm install',
  })
  if (!c.ok(inst.code === 0, `npm install ${specs.join(' ')}: ${describe(inst)}`)) return false
  fs.writeFileSync(path.join(CACHE, '.ready'), specs.join('\n') + '\n')
  return true
}

/** TAP lines: [{ ok, n, name }] and the summary counts. */
function parseTap(out) {
  const asserts = []
  for (const line of out.split('\n')) {
    const m = /^(not ok|ok) (\d+) ?(.*)$/.exec(line)
    if (m) asserts.push({ ok: m[1] === 'ok', n: Number(m[2]), name: m[3].replace(/ # (time|duration)=.*$/i, '') })
  }
  const count = (k) => Number((new RegExp(`^# ${k}\\s+(\\d+)`, 'm').exec(out) || [])[1] || 0)
  return { asserts, tests: count('tests'), pass: count('pass'), fail: count('fail') }
}

function compare(c, ref, got, what) {
  c.eq([got.tests, got.pass, got.fail], [ref.tests, ref.pass, ref.fail], `${what}: tests/pass/fail`)
  c.eq(got.asserts.length, ref.asserts.length, `${what}: number of assertions`)
  let diff = 0
  for (let i = 0; i < Math.max(ref.asserts.length, got.asserts.length); i++) {
    const a = ref.asserts[i]
    const b = got.asserts[i]
    if (!a || !b || a.ok !== b.ok || a.name !== b.name) {
      if (diff++ < 5) c.ok(false, `${what}: assertion ${i + 1} differs: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`)
    }
  }
  c.ok(diff === 0, `${what}: ${diff} assertions differ from the run without the sampler`)
}

main(async (o, c) => {
  const node = o.node || process.execPath
  if (!(await install(c))) return
  const tape = path.join(CACHE, 'node_modules', 'tape', 'bin', 'tape')
  const args = [tape, 'test/*.js']
  const env = { NODE_OPTIONS: '' }

  const ref = await run(node, args, { cwd: PKG, env, timeoutMs: 120000, note: 'suite without sampler' })
  const refTap = parseTap(ref.stdout)
  c.ok(refTap.asserts.length > 100, `the suite ran only ${refTap.asserts.length} assertions without the sampler (${describe(ref)})`)
  c.info.suite = `${PACKAGE}@${VERSION}: ${refTap.tests} assertions, ${refTap.pass} pass, ${refTap.fail} fail, ${ref.ms} ms without the sampler`

  const runs = o.runs ?? 2
  const dir = tmpdir('suite')
  const times = []
  for (let i = 0; i < runs; i++) {
    const out = path.join(dir, `run-${i}.machprof`)
    const mode = MODES[i % 2]
    const what = `sampled run ${i} (${mode} mode)`
    const r = await run(node, args, {
      cwd: PKG,
      env: {
        NODE_OPTIONS: `--require ${path.join(ROOT, 'register.js')}`,
        MACHSAMPLER_INTERVAL_MS: '1',
        MACHSAMPLER_MODE: mode,
        MACHSAMPLER_OUTPUT: out,
      },
      timeoutMs: 120000,
      note: `suite with sampler #${i}`,
    })
    times.push(r.ms)
    c.eq(r.code, ref.code, `${what}: exit status (${describe(r)})`)
    compare(c, refTap, parseTap(r.stdout), what)
    const profile = loadSamples(c, out, what, mode)
    c.samples += profile
    progress(`run ${i}`)
  }
  // Once through the CLI.
  const cliOut = path.join(dir, 'cli.machprof')
  const cliMode = MODES[runs % 2]
  const r = await run(node, [path.join(ROOT, 'bin', 'machsampler.js'), 'record', '-q', '--interval', '1', '--mode', cliMode, '-o', cliOut, '--', node, ...args], {
    cwd: PKG,
    env,
    timeoutMs: 180000,
    note: 'suite under the CLI',
  })
  c.eq(r.code, ref.code, `CLI run: exit status (${describe(r)})`)
  compare(c, refTap, parseTap(r.stdout), 'CLI run')
  c.samples += loadSamples(c, cliOut, `CLI run (${cliMode} mode)`, cliMode)
  c.info.sampledMs = times
  fs.rmSync(dir, { recursive: true, force: true })
})

function loadSamples(c, file, what, mode) {
  try {
    const p = require('../..').loadProfile(file)
    const n = weightSum(p)
    c.ok(n > 50, `${what}: only ${n} samples in the profile`)
    c.eq(checkProfile(p, { mode }), 'ok', `${what}: the profile`)
    return n
  } catch (e) {
    c.ok(false, `${what}: no profile: ${e.code} ${e.message}`)
    return 0
  }
}
