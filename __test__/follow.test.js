'use strict'
// What users run: `record` follows every Node.js process of a command (npx,
// npm run, shell scripts, fork/spawn/exec) into one profile, names threads
// by role (on Node 20 every OS thread name is "node"), shows views that
// fold runtime internals, and says so when there is nothing to draw or
// JavaScript it cannot name.

const fs = require('fs')
const path = require('path')
const ms = require('..')
const h = require('./fixtures/cli-helpers')
const { fetchNode } = require('../scripts/fetch-node')

const NODE = process.execPath
let dir

beforeAll(() => {
  dir = h.tmpdir('follow')
  // A project as a user has one: a local package with a bin (what npx
  // runs, offline), and npm scripts that start node through a shell.
  const tool = path.join(dir, 'node_modules', 'busytool')
  fs.mkdirSync(path.join(tool, 'bin'), { recursive: true })
  fs.writeFileSync(
    path.join(tool, 'package.json'),
    JSON.stringify({ name: 'busytool', version: '1.0.0', bin: { busytool: 'bin/busytool.js' } }),
  )
  fs.writeFileSync(
    path.join(tool, 'bin', 'busytool.js'),
    [
      '#!/usr/bin/env node',
      // The clock is read once per 100,000 steps: the time is the function's own, not Date.now's.
      'function busyToolCompile(ms) { const end = Date.now() + ms; let x = 0; while (Date.now() < end) for (let i = 0; i < 1e5; i++) x += Math.sqrt(x + i); return x }',
      'busyToolCompile(600)',
    ].join('\n'),
    { mode: 0o755 },
  )
  fs.mkdirSync(path.join(dir, 'node_modules', '.bin'))
  fs.symlinkSync('../busytool/bin/busytool.js', path.join(dir, 'node_modules', '.bin', 'busytool'))
  fs.writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({ name: 'app', version: '1.0.0', private: true, scripts: { build: 'busytool' } }),
  )
  fs.writeFileSync(
    path.join(dir, 'forked.js'),
    'function forkedChildSpins(ms) { const end = Date.now() + ms; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1); return x }\nforkedChildSpins(600)\n',
  )
  fs.writeFileSync(
    path.join(dir, 'parent.js'),
    [
      "const cp = require('child_process')",
      "const { Worker } = require('worker_threads')",
      'function parentSpinsFirst(ms) { const end = Date.now() + ms; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1); return x }',
      "const w = new Worker(__dirname + '/pool-task.js')",
      'parentSpinsFirst(200)',
      "cp.spawn('sh', ['-c', 'sleep 0.1'], { stdio: 'inherit' })",
      "cp.fork(__dirname + '/forked.js').on('exit', () => w.terminate())",
    ].join('\n'),
  )
  fs.writeFileSync(
    path.join(dir, 'pool-task.js'),
    'function poolTaskSpin() { const end = Date.now() + 1500; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1); return x }\npoolTaskSpin()\n',
  )
})

afterAll(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true })
})

/** Function names of a .machprof file. */
function names(file) {
  return ms.loadProfile(file).symbols.functions.name
}

/** The environment npm and npx get: offline, with their own cache. */
const NPM_ENV = { npm_config_offline: 'true', npm_config_update_notifier: 'false', npm_config_fund: 'false' }

describe('record follows Node.js processes', () => {
  test('npx <local bin>: the tool itself is profiled, not only npm', () => {
    const out = path.join(dir, 'npx.machprof')
    const r = h.cli(['record', '-o', out, '--', 'npx', 'busytool'], { cwd: dir, env: NPM_ENV })
    expect(r.stderr).toMatch(/processes +\d+ Node\.js processes profiled:/)
    expect(r.stderr).toMatch(/pid \d+ +[\d,]+ samples +node .*busytool/)
    expect(r.status).toBe(0)
    expect(names(out)).toContain('busyToolCompile (' + fs.realpathSync(path.join(dir, 'node_modules/busytool/bin/busytool.js')) + ':2:25)')
    // The summary's top functions include the tool's own.
    expect(r.stderr).toContain('busyToolCompile')
  }, 120000)

  test('npm run <script>: the script the shell starts is profiled; the shell is listed, not touched', () => {
    const out = path.join(dir, 'npmrun.machprof')
    const r = h.cli(['record', '-o', out, '--', 'npm', 'run', 'build'], { cwd: dir, env: NPM_ENV })
    expect(r.status).toBe(0)
    expect(names(out).some((n) => n.startsWith('busyToolCompile ('))).toBe(true)
    const p = ms.loadProfile(out)
    expect(new Set(p.threads.map((t) => t.tid)).size).toBe(p.threads.length)
    expect(r.stderr).toMatch(/not Node\.js, not profiled: sh -c .*busytool/)
  }, 120000)

  test('fork, spawn and workers: one .machprof for every process, split per process for flame graphs', () => {
    const out = path.join(dir, 'tree.machprof')
    // Wall time: each process is sampled however busy the machine is.
    const r = h.cli(['record', '--mode', 'wall', '-o', out, '--', NODE, 'parent.js'], { cwd: dir })
    expect(r.status).toBe(0)
    expect(r.stderr).toMatch(/processes +2 Node\.js processes profiled:/)
    expect(r.stderr).toMatch(/not Node\.js, not profiled: sh -c sleep 0\.1 \(pid \d+\)/)
    const all = names(out)
    for (const f of ['parentSpinsFirst', 'forkedChildSpins']) {
      expect(all.some((n) => n.startsWith(`${f} (`))).toBe(true)
    }
    // The worker is named by its script, from what Node knows of it.
    const rep = ms.profileReport(ms.loadProfile(out), { thread: 'worker' })
    expect(rep.threads.map((t) => t.role)).toEqual([`worker 1 (${fs.realpathSync(dir)}/pool-task.js)`])
    // A format that holds one process: one file per process, listed.
    const html = path.join(dir, 'tree.html')
    const c = h.cli(['convert', out, '-o', html])
    expect(c.status).toBe(0)
    const written = [...c.stderr.matchAll(/wrote (\S+) \(html\)/g)].map((m) => m[1])
    expect(written).toHaveLength(2)
    for (const f of written) {
      expect(f).toMatch(/tree\.\d+\.html$/)
      expect(fs.existsSync(f)).toBe(true)
    }
    expect(fs.existsSync(html)).toBe(false)
    // A stream takes one file: collapsed stacks of both processes, or an
    // error naming the formats that hold them all; never two documents one
    // after the other, nor `/dev/stdout.<pid>` files.
    const pids = [...new Set(ms.profileReport(ms.loadProfile(out)).threads.map((t) => t.pid))]
    const folded = h.cli(['convert', out, '-o', '-', '-f', 'collapsed'])
    expect(folded.status).toBe(0)
    for (const pid of pids) expect(folded.stdout).toContain(`, pid ${pid});`)
    for (const target of ['-', '/dev/stdout']) {
      const one = h.cli(['convert', out, '-o', target, '-f', 'speedscope'])
      expect(one.status).toBe(1)
      expect(one.stdout).toBe('')
      expect(one.stderr).toContain(`the profile holds 2 processes (pids ${pids.join(', ')}) and a speedscope file holds one`)
      expect(one.stderr).toContain('use --format collapsed, firefox or machprof')
    }
    // /dev/stdout sent to a regular file is a stream too.
    const redirected = path.join(dir, 'redirected.json')
    const fd = fs.openSync(redirected, 'w')
    const red = require('child_process').spawnSync(NODE, [h.CLI, 'convert', out, '-o', '/dev/stdout', '-f', 'speedscope'], { stdio: ['ignore', fd, 'pipe'], encoding: 'utf8' })
    fs.closeSync(fd)
    expect(red.status).toBe(1)
    expect(red.stderr).toContain('/dev/stdout, a stream, takes one file')
    expect(fs.statSync(redirected).size).toBe(0)
    expect(fs.readdirSync('/dev').filter((n) => n.startsWith('stdout.'))).toEqual([])
    // record keeps what it could not write as asked.
    const kept = h.cli(['record', '--mode', 'wall', '-q', '-o', '/dev/stdout', '-f', 'html', '--', NODE, 'parent.js'], { cwd: dir })
    expect(kept.status).toBe(1)
    const at = /the recording was kept in (\S+\.machprof);/.exec(kept.stderr)
    expect(at).not.toBeNull()
    expect(new Set(ms.profileReport(ms.loadProfile(at[1])).threads.map((t) => t.pid)).size).toBe(2)
    fs.rmSync(at[1])
  }, 120000)

  test('spawnSync, execFileSync and execSync: Node children are profiled, the others listed', () => {
    const script = path.join(dir, 'sync-children.js')
    fs.writeFileSync(
      script,
      [
        "const cp = require('child_process')",
        "cp.spawnSync('sh', ['-c', 'true'])",
        "cp.execFileSync('ls', [__dirname])",
        "cp.execSync('echo listed-too')",
        "try { cp.execSync('exit 3', { stdio: 'ignore' }) } catch {}",
        "cp.execFileSync(process.execPath, ['-e', 'function syncChildSpins() { const end = Date.now() + 300; while (Date.now() < end); } syncChildSpins()'])",
      ].join('\n'),
    )
    const out = path.join(dir, 'sync.machprof')
    const r = h.cli(['record', '--mode', 'wall', '-o', out, '--', NODE, script], { cwd: dir })
    expect(r.status).toBe(0)
    expect(r.stderr).toMatch(/processes +2 Node\.js processes profiled:/)
    const listed = /not Node\.js, not profiled: (.*)/.exec(r.stderr)[1]
    expect(listed).toMatch(/^sh -c true \(pid \d+\), ls \S+, \/bin\/sh -c echo listed-too, \/bin\/sh -c exit 3 \(pid \d+\)$/)
    expect(names(out).some((n) => n.startsWith('syncChildSpins ('))).toBe(true)
  }, 120000)

  test('children given an environment of their own are profiled; a shell that sets NODE_OPTIONS is said to drop the preload', () => {
    const script = path.join(dir, 'own-env.js')
    fs.writeFileSync(
      script,
      [
        "const cp = require('child_process')",
        "const spin = (name) => `function ${name}() { const e = Date.now() + 400; while (Date.now() < e); } ${name}()`",
        "cp.spawnSync(process.execPath, ['-e', spin('syncChildOwnEnv')], { env: { PATH: process.env.PATH, NODE_OPTIONS: '--max-old-space-size=200' } })",
        "cp.spawnSync('sh', ['-c', `NODE_OPTIONS=--max-old-space-size=400 \"${process.execPath}\" -e \"${spin('shellChild')}\"`])",
        "cp.execFile(process.execPath, ['-e', spin('asyncChildOwnEnv')], { env: { ...process.env, NODE_OPTIONS: '--max-old-space-size=300' } }, (e) => { if (e) throw e })",
      ].join('\n'),
    )
    const out = path.join(dir, 'own-env.machprof')
    const r = h.cli(['record', '--mode', 'wall', '-o', out, '--', NODE, script], { cwd: dir })
    expect(r.status).toBe(0)
    expect(r.stderr).toMatch(/processes +3 Node\.js processes profiled:/)
    const all = names(out)
    for (const fn of ['syncChildOwnEnv', 'asyncChildOwnEnv']) expect(all.some((n) => n.startsWith(`${fn} (`))).toBe(true)
    expect(all.some((n) => n.startsWith('shellChild ('))).toBe(false)
    expect(r.stderr).toMatch(/sets NODE_OPTIONS itself, which drops machsampler's preload/)
  }, 120000)

  test('--no-follow: only the first process records', () => {
    const out = path.join(dir, 'nofollow.machprof')
    const r = h.cli(['record', '--no-follow', '--mode', 'wall', '-o', out, '--', NODE, 'parent.js'], { cwd: dir })
    expect(r.status).toBe(0)
    expect(r.stderr).not.toMatch(/processes +\d+ Node\.js processes/)
    const all = names(out)
    expect(all.some((n) => n.startsWith('parentSpinsFirst ('))).toBe(true)
    expect(all.some((n) => n.startsWith('forkedChildSpins ('))).toBe(false)
  }, 120000)
})

describe('threads by role', () => {
  test('Node 20: every thread is "node" to the OS; the report names them by role, and --thread main works', () => {
    const node20 = fetchNode(20)
    const out = path.join(dir, 'roles.machprof')
    const r = h.cli(['record', '--mode', 'wall', '-o', out, '--', node20, h.DEMO], {
      env: { DEMO_DURATION_MS: '1200' },
    })
    expect(r.status).toBe(0)
    const p = ms.loadProfile(out)
    // The addon's own threads (machsampler, machsampler-v8, -exit) are not
    // sampled.
    expect(new Set(p.threads.map((t) => t.name))).toEqual(new Set(['node']))
    const rep = ms.profileReport(p, { includeIdle: true })
    const roles = new Set(rep.threads.map((t) => t.role))
    for (const role of ['main', 'libuv pool', 'V8 worker']) expect(roles).toContain(role)
    expect([...roles].filter((x) => /^worker \d+ \(.*demo\.js\)$/.test(x))).toEqual([expect.anything(), expect.anything()])
    // The summary's threads table shows the roles.
    expect(r.stderr).toMatch(/^ +\d+ +[\d,]+ +[\d.]+% +[\d,]+ +main$/m)
    expect(r.stderr).toMatch(/libuv pool$/m)

    const main = h.cli(['report', out, '--thread', 'main'])
    expect(main.status).toBe(0)
    expect(main.stdout).toContain('fibonacciOnMainThread')
    expect(main.stdout).not.toContain('primeSieveInWorker')
    const pool = h.cli(['report', out, '--thread', 'pool'])
    expect(pool.status).toBe(0)
    expect(pool.stdout).not.toContain('fibonacciOnMainThread')
    const bad = h.cli(['report', out, '--thread', 'nosuch'])
    expect(bad.status).toBe(1)
    expect(bad.stderr).toMatch(/no thread has the role, name or tid 'nosuch'; threads are: main \(\d+\)/)
  }, 180000)
})

describe('views', () => {
  test('js view: runtime internals fold into the calling JS function; native view has no JS', () => {
    const out = path.join(dir, 'demo.machprof')
    expect(h.cli(['record', '-q', '-o', out, '--', NODE, h.DEMO], { env: { DEMO_DURATION_MS: '1500' } }).status).toBe(0)
    const js = h.cli(['report', out, '--view', 'js', '--thread', 'main', '--top', '3'])
    expect(js.status).toBe(0)
    const top = js.stdout.split('Top 3 functions by self samples')[1].split('\n').slice(2, 5).join('\n')
    expect(top).toMatch(/fibonacciOnMainThread \(/)
    expect(top).not.toMatch(/Builtins_|v8::|\[node\]/)
    const p = ms.loadProfile(out)
    const jsReport = ms.profileReport(p, { view: 'js', top: 100000 })
    expect(jsReport.functions.every((f) => f.kind === 'js' || f.module !== 'node')).toBe(true)
    const nat = ms.profileReport(p, { view: 'native', top: 100000 })
    expect(nat.functions.some((f) => f.kind === 'js')).toBe(false)
    expect(nat.functions.length).toBeGreaterThan(10)
    // convert takes the view too.
    const folded = path.join(dir, 'demo-js.folded')
    expect(h.cli(['convert', out, '--view', 'js', '-o', folded]).status).toBe(0)
    expect(fs.readFileSync(folded, 'utf8')).not.toMatch(/Builtins_JSEntry/)
    const bad = h.cli(['report', out, '--view', 'nope'])
    expect(bad.status).toBe(2)
    expect(bad.stderr).toContain("--view must be one of mixed, js, native, got 'nope'")
  }, 120000)
})

describe('saying so when something is off', () => {
  test('no samples: one line, no file, a failing status', () => {
    const out = path.join(dir, 'empty.html')
    const r = h.cli(['record', '--interval', '1000', '-o', out, '--', NODE, '-e', '0'])
    expect(r.status).toBe(1)
    expect(r.stderr.trim().split('\n')).toHaveLength(1)
    expect(r.stderr).toMatch(/^machsampler: no samples: .* ran [\d.]+ m?s, less than one sampling interval \(1\.00 s\)/)
    expect(fs.existsSync(out)).toBe(false)
  }, 60000)

  test('a detached child that outlives record says nothing when it ends later', () => {
    // It lives 6.5 s on record's stderr, past record's end: its profile has
    // nowhere to go, and no error of it reaches the user's terminal.
    const child = 'const e = Date.now() + 300; while (Date.now() < e); setTimeout(() => {}, 6500)'
    const parent = `require('child_process').spawn(process.execPath, ['-e', ${JSON.stringify(child)}], { detached: true, stdio: 'inherit' }).unref()`
    const r = h.cli(['record', '-q', '-o', path.join(dir, 'detached.machprof'), '--', NODE, '-e', parent])
    // The captured stderr closes only when the child has ended.
    expect(r.status).toBe(0)
    expect(r.stderr).toBe('')
  }, 60000)

  test('the summary ends with what the profiler cost', () => {
    const r = h.cli(['record', '-o', path.join(dir, 'cost.collapsed'), '--', NODE, h.BUSY])
    expect(r.status).toBe(0)
    const m =
      /Profiler cost: sampler thread ([\d.]+) ms CPU \(([\d.]+)% of one core\); sampled threads stopped ([\d.]+) m?s in all, ([\d.]+) µs per sample; JavaScript threads ([\d.]+) m?s CPU describing their code for names(; V8 writing its code log about [\d.]+ m?s \(--no-inline turns it off\))?\./.exec(
        r.stderr,
      )
    expect(m).not.toBeNull()
    expect(Number(m[1])).toBeGreaterThan(0)
    // The main thread's code, at least, was described.
    expect(Number(m[5])).toBeGreaterThan(0)
  }, 60000)

  test("V8 writing the code log record turns on is counted as the profiler's cost; --no-inline has none", () => {
    // Each worker's start-up has V8 log every function of the modules it loads.
    const script = path.join(dir, 'log-heavy.js')
    fs.writeFileSync(
      script,
      "const { Worker } = require('worker_threads')\nfor (let i = 0; i < 12; i++) new Worker('let x = 0; for (let i = 0; i < 1e5; i++) x += i', { eval: true })\n",
    )
    const cost = (opts) => {
      const r = h.cli(['record', '--interval', '1', ...opts, '-o', path.join(dir, 'log-heavy.collapsed'), '--', NODE, script])
      expect(r.status).toBe(0)
      const m = /; V8 writing its code log about ([\d.]+) (m?s) \(--no-inline turns it off\)\./.exec(r.stderr)
      return m ? Number(m[1]) * (m[2] === 's' ? 1000 : 1) : 0
    }
    expect(cost([])).toBeGreaterThan(0)
    expect(cost(['--no-inline'])).toBe(0)
  }, 60000)

  test('JavaScript that cannot be named: one warning that says why and what to do', () => {
    // A profile taken with JS names off has every JS frame unnamed: the
    // same symptom as a worker whose isolate the sampler cannot read.
    const raw = path.join(dir, 'unnamed-raw.machprof')
    const program = `const ms = require(${JSON.stringify(path.join(__dirname, '..'))})
ms.start({ intervalMs: 1, jsNames: false })
function spin() { const e = Date.now() + 300; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1); return x }
spin()
ms.saveProfile(ms.stop(), ${JSON.stringify(raw)})`
    expect(require('child_process').spawnSync(NODE, ['-e', program]).status).toBe(0)
    const r = h.cli(['convert', raw, '-o', path.join(dir, 'unnamed.collapsed')])
    expect(r.status).toBe(0)
    const warnings = r.stderr.split('\n').filter((l) => l.includes('has no name'))
    expect(warnings).toHaveLength(1)
    expect(warnings[0]).toMatch(/^machsampler: [\d.]+% of thread main \(\d+\)'s samples are in JavaScript that has no name/)
    expect(warnings[0]).toContain('--perf-map')
    // Asked for with --no-jit-names, unnamed JavaScript is not warned about.
    const asked = h.cli(['record', '--no-jit-names', '-o', path.join(dir, 'unnamed.machprof'), '--', NODE, h.BUSY])
    expect(asked.status).toBe(0)
    expect(asked.stderr).not.toContain('has no name')
  }, 60000)
})

describe('summary lines', () => {
  test("a child's long command line keeps its script and loses node's options", () => {
    const { shortCommand } = require('../lib/cli/follow')
    const opts = Array.from({ length: 40 }, (_, i) => `--option-${i}=value`).join(' ')
    expect(shortCommand(`node ${opts} /app/test/a.test.js --grep x`)).toBe('node [options] /app/test/a.test.js --grep x')
    expect(shortCommand('node app.js')).toBe('node app.js')
    const long = shortCommand(`node /app/${'x'.repeat(300)}.js`)
    expect(long).toHaveLength(120)
    expect(long.endsWith('…')).toBe(true)
  })
})
