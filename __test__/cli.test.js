'use strict'
// The machsampler command end to end: record (the README's command on the
// demo app, every way a program can end, signals, options), report,
// convert, --help, and every bad input: one line on stderr, a non-zero
// conventional exit status, no partial output.

const fs = require('fs')
const path = require('path')
const { spawnSync } = require('child_process')
const ms = require('..')
const h = require('./fixtures/cli-helpers')

const NODE = process.execPath

// Paths are fixed when the file loads: test.each tables are built then.
const dir = h.tmpdir('cli')
const machprof = path.join(dir, 'demo.machprof') // the demo, recorded once

beforeAll(() => {
  expect(h.recordDemo(dir).file).toBe(machprof)
}, 120000)

afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true })
})

function names(file) {
  return ms.loadProfile(file).symbols.functions.name.join('\n')
}

describe('record', () => {
  test('one signal to the whole process group reaches the program once', async () => {
    const script = path.join(dir, 'count-sigint.js')
    fs.writeFileSync(
      script,
      "let n = 0\nprocess.on('SIGINT', () => { n++; console.log('got SIGINT ' + n); if (n >= 2) process.exit(7) })\n" +
        'setInterval(() => { let x = 0; for (let i = 0; i < 1e6; i++) x += i }, 10)\n',
    )
    for (let round = 0; round < 3; round++) {
      const child = require('child_process').spawn(NODE, [h.CLI, 'record', '-q', '-o', path.join(dir, 'group.machprof'), '--', NODE, script], {
        detached: true, // its own process group, as a shell job is
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      let out = ''
      child.stdout.on('data', (d) => (out += d))
      const exited = new Promise((resolve) => child.on('exit', resolve))
      await new Promise((resolve) => setTimeout(resolve, 1500))
      process.kill(-child.pid, 'SIGINT')
      // record forwards what the program did not log within 500 ms.
      await new Promise((resolve) => setTimeout(resolve, 1200))
      expect(out.match(/got SIGINT/g)).toEqual(['got SIGINT'])
      process.kill(-child.pid, 'SIGINT')
      expect(await exited).toBe(7)
    }
  }, 60000)

  test('a record killed with SIGKILL leaves a scratch directory that the next run removes', async () => {
    const tmp = h.tmpdir('killed-tmp')
    try {
      const env = { ...process.env, TMPDIR: tmp }
      const child = require('child_process').spawn(NODE, [h.CLI, 'record', '-q', '-o', path.join(dir, 'killed.html'), '--', NODE, '-e', 'setTimeout(() => {}, 1000)'], {
        env,
        stdio: 'ignore',
      })
      await new Promise((resolve) => setTimeout(resolve, 600))
      expect(h.listDir(tmp)).toHaveLength(1)
      child.kill('SIGKILL')
      await new Promise((resolve) => setTimeout(resolve, 1500)) // the orphaned program ends
      expect(h.listDir(tmp)).toHaveLength(1)
      const r = h.cli(['convert', machprof, '-o', '-', '-f', 'collapsed'], { env })
      expect(r.status).toBe(0)
      expect(h.listDir(tmp)).toEqual([])
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true })
    }
  }, 30000)

  test('stacks deeper than the sampler follows are said to be cut, never silently', () => {
    const fixture = path.join(__dirname, 'fixtures', 'deep-recursion.js')
    for (const depth of ['512', '1024']) {
      const out = path.join(dir, `deep-${depth}.machprof`)
      const r = h.cli(['record', '-q', '--depth', depth, '-o', out, '--', NODE, fixture, '1000'])
      expect(r.status).toBe(0)
      const s = ms.loadProfile(out).stats
      const cut = s.truncatedStacks + s.endedTruncatedCopy
      expect(cut / s.samplesCaptured).toBeGreaterThan(0.5)
      expect(r.stderr).toMatch(/of stacks were (cut at the depth limit|deeper than the sampler could follow)/)
    }
  })

  test("the README's command: summary on stderr, flame-graph HTML left behind, program output untouched", () => {
    const out = path.join(dir, 'readme.html')
    const r = h.cli(['record', '-o', out, '--', NODE, 'examples/demo.js'])
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/^demo: main thread \d+ fib/m) // the program's own stdout
    expect(r.stderr).toMatch(/^machsampler: recorded .*examples\/demo\.js \(pid \d+\)$/m)
    expect(r.stderr).toMatch(/duration +\d\.\d\d s, sampling every 10 ms/)
    expect(r.stderr).toMatch(/samples +[\d,]+ \([\d,]+ idle\), \d+ dropped/)
    expect(r.stderr).toMatch(/threads +\d+ sampled of \d+ seen/)
    expect(r.stderr).toContain(`wrote     ${out} (html)`)
    expect(r.stderr).toContain('Top 15 functions by self samples')
    expect(r.stderr).toContain('Top 15 functions by total samples')
    expect(r.stderr).toContain('fibonacciOnMainThread')
    expect(fs.readFileSync(out, 'utf8').startsWith('<!DOCTYPE html>')).toBe(true)
    // The perf map that our flags made is cleaned up.
    const pid = /\(pid (\d+)\)/.exec(r.stderr)[1]
    expect(fs.existsSync(`/tmp/perf-${pid}.map`)).toBe(false)
  }, 60000)

  test('the package exposes the command as a bin', () => {
    const pkg = require('../package.json')
    expect(pkg.bin.machsampler).toBe('bin/machsampler.js')
    const bin = path.join(h.ROOT, pkg.bin.machsampler)
    expect(fs.readFileSync(bin, 'utf8').startsWith('#!/usr/bin/env node')).toBe(true)
    fs.accessSync(bin, fs.constants.X_OK)
    for (const f of ['register.js', 'bin/', 'lib/']) expect(pkg.files).toContain(f)
  })

  test('without -o the profile goes to a timestamped file in the current directory, named in the summary', () => {
    const cwd = h.tmpdir('cwd')
    try {
      const r = h.cli(['record', '--', NODE, h.BUSY], { cwd })
      expect(r.status).toBe(0)
      const files = h.listDir(cwd)
      expect(files).toHaveLength(1)
      expect(files[0]).toMatch(/^machsampler-\d{8}-\d{6}\.html$/)
      expect(r.stderr).toContain(`wrote     ${files[0]} (html)`)
    } finally {
      fs.rmSync(cwd, { recursive: true, force: true })
    }
  })

  test.each([
    ['a normal end', [], 0],
    ['process.exit(3)', ['exit', '3'], 3],
    ['an uncaught exception', ['throw'], 1],
    ['an unhandled rejection', ['reject'], 1],
  ])('the profile is written on %s and the exit status passed through', (_, args, status) => {
    const out = path.join(dir, `end-${args.join('-') || 'normal'}.machprof`)
    const r = h.cli(['record', '-q', '-o', out, '--', NODE, h.BUSY, ...args])
    expect(r.status).toBe(status)
    expect(names(out)).toContain('busyLoopForCliTest')
  })

  test.each([
    ['SIGTERM', 143, 'wait'],
    ['SIGINT', 130, 'wait'],
    ['SIGHUP', 129, 'wait'],
    ['SIGTERM', 0, 'handle'],
    // Never back in the event loop, where JavaScript signal listeners run.
    ['SIGTERM', 143, 'spin'],
    ['SIGINT', 130, 'spin'],
  ])('%s: profile written, status %p (program %s)', async (signal, status, how) => {
    const out = path.join(dir, `signal-${signal}-${how}.machprof`)
    const run = h.cliAsync(['record', '-q', '-o', out, '--', NODE, h.BUSY, how], { timeoutMs: 20000 })
    await run.printed('ready')
    await new Promise((res) => setTimeout(res, 200))
    run.child.kill(signal)
    const r = await run.done
    expect(r.status).toBe(status)
    if (how === 'handle') expect(r.stdout).toContain('handled SIGTERM') // its own handler ran
    expect(names(out)).toContain('busyLoopForCliTest')
  }, 30000)

  // cli-busy.js spins 300 ms before it prints "ready": a 0.2 s duration has
  // ended sampling by the signal, and the profile ends where sampling did.
  test.each([
    ['while sampling', 'relay-kill.machprof', [], 300],
    ['after --duration ended sampling', 'relay-kill-duration.machprof', ['--duration', '0.2'], 2000],
  ])('a busy child killed by its wrapper soon after a relayed SIGINT (as under tsx) keeps its profile up to the signal, %s', async (_, file, opts, waitMs) => {
    const out = path.join(dir, file)
    const run = h.cliAsync(['record', '-o', out, ...opts, '--', NODE, path.join(__dirname, 'fixtures', 'cli-relay-kill.js')], { timeoutMs: 20000 })
    await run.printed('ready')
    await new Promise((res) => setTimeout(res, waitMs))
    run.child.kill('SIGINT')
    const r = await run.done
    expect(r.status).toBe(137)
    expect(r.stderr).toMatch(/cut short: .*cli-busy\.js spin-handle \(pid \d+\) was killed before it could save/)
    expect(names(out)).toContain('busyLoopForCliTest')
    const p = ms.loadProfile(out)
    const seconds = Number(p.endTimeNs - p.startTimeNs) / 1e9
    // Two processes, each sampled from its own start: the child's begins later.
    // Ending at the signal instead would be more than waitMs after the child's start.
    if (opts.length) expect(seconds).toBeLessThan(waitMs / 1000 - 0.5)
  }, 30000)

  // SIGKILL from a user or a supervisor, or the out-of-memory killer: no
  // signal comes first, so only a periodic checkpoint keeps anything.
  test.each([
    ['keeps its profile up to its last periodic checkpoint', ['--checkpoint', '0.3'], true],
    ['leaves nothing with --checkpoint 0', ['--checkpoint', '0'], false],
  ])('a busy program killed outright (SIGKILL, no signal first) %s', async (_, opts, kept) => {
    const script = path.join(dir, 'spin-until-killed.js')
    const pidFile = path.join(dir, `spin-until-killed-${kept}.pid`)
    fs.writeFileSync(
      script,
      "function spinUntilKilled() { let x = 0; for (;;) x += Math.sqrt(x + 1) }\n" +
        "require('fs').writeFileSync(process.argv[2], String(process.pid))\nconsole.log('ready')\nspinUntilKilled()\n",
    )
    const out = path.join(dir, `killed-${kept}.machprof`)
    const run = h.cliAsync(['record', '-o', out, ...opts, '--', NODE, script, pidFile], { timeoutMs: 20000 })
    await run.printed('ready')
    await new Promise((res) => setTimeout(res, 1200))
    process.kill(Number(fs.readFileSync(pidFile, 'utf8')), 'SIGKILL')
    const r = await run.done
    expect(r.status).toBe(137)
    if (kept) {
      expect(r.stderr).toMatch(/cut short: .*spin-until-killed\.js .*\(pid \d+\) was killed before it could save; its profile ends at its last checkpoint/)
      expect(names(out)).toContain('spinUntilKilled')
    } else {
      expect(r.stderr).toMatch(/no profile was recorded: .* died of signal 9/)
      expect(fs.existsSync(out)).toBe(false)
    }
  }, 30000)

  /** Runs cli-busy.js `how` under the preload alone, sends SIGINT once it spins; its end (killed after `timeoutMs`). */
  async function preloadInterrupted(how, out, timeoutMs) {
    const run = h.spawnAsync(NODE, ['-r', path.join(h.ROOT, 'register.js'), h.BUSY, how], { env: { MACHSAMPLER_OUTPUT: out }, timeoutMs })
    await run.printed('ready')
    run.child.kill('SIGINT')
    return run.done
  }

  test('the preload alone: a signal ends a program that never returns to the event loop, and the profile is written', async () => {
    const out = path.join(dir, 'preload-spin.cpuprofile')
    const r = await preloadInterrupted('spin', out, 15000)
    // Ended by the signal, as without machsampler, not by the timeout's SIGKILL.
    expect([r.status, r.signal]).toEqual([null, 'SIGINT'])
    expect(r.stderr).toContain(`wrote ${out}`)
    const prof = JSON.parse(fs.readFileSync(out, 'utf8'))
    expect(prof.nodes.some((n) => n.callFrame.functionName.startsWith('busyLoopForCliTest'))).toBe(true)
  }, 30000)

  test('a signal the program listens for is left to it, busy or not', async () => {
    const out = path.join(dir, 'preload-spin-handle.cpuprofile')
    // As without machsampler: its listener never runs, so it goes on until
    // the timeout kills it.
    const r = await preloadInterrupted('spin-handle', out, 2500)
    expect([r.status, r.signal]).toEqual([null, 'SIGKILL'])
    expect(fs.existsSync(out)).toBe(false)
  }, 30000)

  test('NODE_OPTIONS is kept; with --no-follow the program and its children see the original', () => {
    const script = [
      "const { execFileSync } = require('child_process')",
      "const v8 = require('v8')",
      "console.log('child', process.env.NODE_OPTIONS, v8.getHeapStatistics().heap_size_limit < 400e6)",
      'for (const end = Date.now() + 200; Date.now() < end;);',
      "execFileSync(process.execPath, ['-e', 'console.log(\"grandchild\", process.env.NODE_OPTIONS)'], { stdio: 'inherit' })",
    ].join(';')
    const out = path.join(dir, 'env.machprof')
    const r = h.cli(['record', '--no-follow', '-q', '-o', out, '--', NODE, '-e', script], {
      env: { NODE_OPTIONS: '--max-old-space-size=200' },
    })
    expect(r.status).toBe(0)
    expect(r.stdout).toContain('child --max-old-space-size=200 true')
    expect(r.stdout).toContain('grandchild --max-old-space-size=200\n')
    expect(fs.existsSync(out)).toBe(true)
    // Following (the default), children inherit the user's options and the
    // preload after them.
    const f = h.cli(['record', '-q', '-o', out, '--', NODE, '-e', script], { env: { NODE_OPTIONS: '--max-old-space-size=200' } })
    expect(f.status).toBe(0)
    expect(f.stdout).toMatch(/^grandchild --max-old-space-size=200 --require \S*register\.js$/m)
  })

  test("V8's log flags stay out of process.execArgv; forked children get them only while record follows them", () => {
    // A child forked after record has ended (its log directory gone) would
    // have V8 write the log to its stdout.
    const script = path.join(dir, 'fork-execargv.js')
    fs.writeFileSync(
      script,
      [
        "const { fork } = require('child_process')",
        "const cmdline = require('fs').readFileSync('/proc/self/cmdline', 'utf8').split('\\0')",
        "const who = process.argv[2] || 'parent'",
        "console.log(who, 'execArgv', JSON.stringify(process.execArgv), 'command line logs', cmdline.includes('--log-code'))",
        "if (who === 'parent') fork(__filename, ['child'])",
      ].join('\n'),
    )
    for (const [opts, childLogs] of [[[], true], [['--no-follow'], false]]) {
      const r = h.cli(['record', '-q', ...opts, '-o', path.join(dir, 'fork-execargv.machprof'), '--', NODE, script])
      expect(r.status).toBe(0)
      expect(r.stdout).toContain('parent execArgv [] command line logs true')
      expect(r.stdout).toContain(`child execArgv [] command line logs ${childLogs}`)
    }
  })

  test('under `node -e`, a forked child runs its module, not the code again (as fork() does)', () => {
    const child = path.join(dir, 'fork-e-child.js')
    fs.writeFileSync(child, "console.log('child ran', process.execArgv.includes('-e'))\n")
    // A depth guard, so a failure cannot fork without end.
    const code = [
      "const depth = Number(process.env.FORK_E_DEPTH || 0)",
      "if (depth > 2) process.exit(0)",
      "console.log('parent ran')",
      `require('child_process').fork(${JSON.stringify(child)}, [], { env: { ...process.env, FORK_E_DEPTH: String(depth + 1) } })`,
    ].join('\n')
    const r = h.cli(['record', '-q', '-o', path.join(dir, 'fork-e.machprof'), '--', NODE, '-e', code])
    expect(r.status).toBe(0)
    expect(r.stdout.match(/parent ran/g)).toHaveLength(1)
    expect(r.stdout).toContain('child ran false')
  })

  test('through a shell: the Node process it starts records', () => {
    const out = path.join(dir, 'shell.machprof')
    const r = h.cli(['record', '-q', '-o', out, '--', 'sh', '-c', `"${NODE}" "${h.BUSY}" exit 4`])
    expect(r.status).toBe(4)
    expect(names(out)).toContain('busyLoopForCliTest')
  })

  test('--no-jit-names leaves JS frames unnamed; the default names them', () => {
    const named = path.join(dir, 'jit.machprof')
    const plain = path.join(dir, 'nojit.machprof')
    expect(h.cli(['record', '-q', '-o', named, '--', NODE, h.BUSY]).status).toBe(0)
    expect(h.cli(['record', '-q', '--no-jit-names', '-o', plain, '--', NODE, h.BUSY]).status).toBe(0)
    expect(names(named)).toContain('busyLoopForCliTest')
    expect(names(plain)).not.toContain('busyLoopForCliTest')
  })

  test('JS names need no perf map; --perf-map adds one and cleans it up', () => {
    const prog = path.join(dir, 'pid.js')
    const pidFile = path.join(dir, 'pid.txt')
    fs.writeFileSync(prog, `require('fs').writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); require(${JSON.stringify(h.BUSY)})`)
    const plain = path.join(dir, 'noperfmap.machprof')
    expect(h.cli(['record', '-q', '-o', plain, '--', NODE, prog]).status).toBe(0)
    const pid = fs.readFileSync(pidFile, 'utf8')
    expect(fs.existsSync(`/tmp/perf-${pid}.map`)).toBe(false)
    expect(names(plain)).toContain('busyLoopForCliTest')
    const withMap = path.join(dir, 'perfmap.machprof')
    expect(h.cli(['record', '-q', '--perf-map', '-o', withMap, '--', NODE, prog]).status).toBe(0)
    expect(fs.existsSync(`/tmp/perf-${fs.readFileSync(pidFile, 'utf8')}.map`)).toBe(false)
    expect(names(withMap)).toContain('busyLoopForCliTest')
  })

  test('--duration stops sampling early; --interval and --depth reach the sampler', () => {
    const out = path.join(dir, 'duration.machprof')
    const r = h.cli(['record', '-q', '--duration', '0.5', '--interval', '5', '--depth', '16', '-o', out, '--', NODE, h.DEMO], {
      env: { DEMO_DURATION_MS: '1500' },
    })
    expect(r.status).toBe(0)
    const p = ms.loadProfile(out)
    const seconds = Number(p.endTimeNs - p.startTimeNs) / 1e9
    expect(seconds).toBeGreaterThan(0.3)
    expect(seconds).toBeLessThan(1.2)
    expect(p.intervalNs).toBe(5000000n)
    let maxDepth = 0
    for (let i = 0; i < p.samples.stack.length; i++) {
      let d = 0
      for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) d++
      maxDepth = Math.max(maxDepth, d)
    }
    expect(maxDepth).toBeLessThanOrEqual(16)
  }, 60000)

  test('on a terminal, a live line shows elapsed time and samples; -q leaves the terminal to the program', () => {
    if (!fs.existsSync('/usr/bin/script')) {
      throw new Error('the live-line test needs script(1) to give the CLI a terminal (Debian: apt-get install bsdutils)')
    }
    const out = path.join(dir, 'live.machprof')
    const q = (s) => `'${s.replace(/'/g, "'\\''")}'`
    const run = (extra) => {
      const cmd = [NODE, h.CLI, 'record', ...extra, '-o', out, '--', NODE, h.DEMO].map(q).join(' ')
      return spawnSync('/usr/bin/script', ['-qec', cmd, '/dev/null'], {
        encoding: 'utf8',
        env: { ...process.env, DEMO_DURATION_MS: '2500' },
        timeout: 60000,
      })
    }
    const r = run([])
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/machsampler: recording \d+\.\d s, [\d,]+ samples/)
    expect(fs.existsSync(out)).toBe(true)
    const quiet = run(['-q'])
    expect(quiet.status).toBe(0)
    expect(quiet.stdout).not.toMatch(/machsampler: recording/)
  }, 90000)
})

describe('register.js without the CLI', () => {
  test('node -r machsampler/register writes MACHSAMPLER_OUTPUT, symbolicated, and keeps the exit status', () => {
    const out = path.join(dir, 'standalone.machprof')
    const flags = ['--perf-basic-prof-only-functions', '-r', path.join(h.ROOT, 'register.js')]
    const r = spawnSync(NODE, [...flags, h.BUSY, 'exit', '5'], {
      env: { ...process.env, MACHSAMPLER_OUTPUT: out },
      encoding: 'utf8',
      timeout: 60000,
    })
    fs.rmSync(`/tmp/perf-${r.pid}.map`, { force: true })
    expect(r.status).toBe(5)
    expect(r.stderr).toBe(`machsampler: wrote ${out}\n`)
    expect(names(out)).toContain('busyLoopForCliTest')
  })
})

describe('register.js refuses settings it cannot honour, before the program runs', () => {
  test.each([
    [{ MACHSAMPLER_INTERVAL_MS: '0x10' }, "MACHSAMPLER_INTERVAL_MS must be a decimal number, got '0x10'"],
    [{ MACHSAMPLER_DURATION_S: '1e1' }, "MACHSAMPLER_DURATION_S must be a decimal number, got '1e1'"],
    [{ MACHSAMPLER_OUTPUT: '/nonexistent-dir/x.html' }, "cannot write '/nonexistent-dir/x.html': no such directory"],
    [{ MACHSAMPLER_OUTPUT: path.join(dir, 'x.prof') }, expect.stringContaining(`cannot tell the format of '${path.join(dir, 'x.prof')}' from its name`)],
  ])('%p', (extra, message) => {
    const r = spawnSync(NODE, ['-r', path.join(h.ROOT, 'register.js'), '-e', 'console.log("ran")'], {
      env: { ...process.env, MACHSAMPLER_OUTPUT: path.join(dir, 'refused.html'), ...extra },
      encoding: 'utf8',
      timeout: 60000,
    })
    expect(r.status).toBe(0)
    expect(r.stdout).toBe('ran\n')
    expect(r.stderr.startsWith('machsampler: cannot start sampling: ')).toBe(true)
    expect(r.stderr.slice('machsampler: cannot start sampling: '.length).trimEnd()).toEqual(message)
    expect(fs.existsSync(path.join(dir, 'refused.html'))).toBe(false)
    expect(fs.existsSync(path.join(dir, 'x.prof'))).toBe(false)
  })
})

describe('report and convert', () => {
  test('report prints threads, hot functions and hot paths', () => {
    const r = h.cli(['report', machprof])
    expect(r.status).toBe(0)
    // Nothing on stderr but, at most, the warning about unnamed JavaScript.
    expect(r.stderr.split('\n').filter((l) => l && !l.includes('has no name'))).toEqual([])
    for (const s of ['Threads (busiest first;', 'Top 15 functions by self samples', 'call paths (leaf first)']) {
      expect(r.stdout).toContain(s)
    }
    expect(r.stdout).toContain('fibonacciOnMainThread')
    expect(r.stdout).toContain('primeSieveInWorker')
    expect(r.stdout).toMatch(/^ +\d+ +[\d,]+ +[\d.]+% +[\d,]+  main$/m)
    expect(r.stdout).toContain('Profiler cost: sampler thread')
  })

  test('convert -o - writes to standard output, and a reader that stops early is no error', () => {
    const cwd = h.tmpdir('stdout')
    try {
      const r = h.cli(['convert', machprof, '-o', '-', '-f', 'collapsed'], { cwd })
      expect(r.status).toBe(0)
      expect(r.stdout.split('\n').filter(Boolean).every((l) => / \d+$/.test(l))).toBe(true)
      expect(r.stdout).toContain('fibonacciOnMainThread')
      expect(h.listDir(cwd)).toEqual([]) // no file named '-'
      // Its scratch directory is gone too, though the closed pipe ends the process.
      const tmp = h.tmpdir('stdout-tmp')
      const head = require('child_process').spawnSync('sh', ['-c', `"${NODE}" "${h.CLI}" convert "${machprof}" -o - -f speedscope | head -c 10`], {
        encoding: 'utf8',
        env: { ...process.env, TMPDIR: tmp },
      })
      expect(head.stdout).toBe('{"$schema"')
      expect(head.stderr).not.toMatch(/pipe|cannot write|error/i)
      expect(h.listDir(tmp)).toEqual([])
      fs.rmSync(tmp, { recursive: true, force: true })
      expect(h.cli(['convert', machprof, '-o', '-']).stderr).toContain('needs --format')
      // record's standard output is the program's: refused before it runs.
      const rec = h.cli(['record', '-o', '-', '-f', 'collapsed', '--', NODE, '-e', 'console.log("ran")'], { cwd })
      expect(rec.status).toBe(2)
      expect(rec.stdout).toBe('')
      expect(rec.stderr).toContain('record cannot write the profile to standard output, which the program shares')
      expect(fs.existsSync(path.join(cwd, '-'))).toBe(false)
      // Any other name for the command's own standard output or error is
      // written to after the program ends, after its output, with a warning.
      const err = h.cli(['record', '-q', '-o', '/dev/stderr', '-f', 'collapsed', '--', NODE, '-e', 'console.log("ran")'], { cwd })
      expect(err.status).toBe(0)
      expect(err.stderr).toContain("machsampler: /dev/stderr is this command's standard error: the profile follows the program's own output there")
      const redirected = path.join(cwd, 'out.txt')
      const fd = fs.openSync(redirected, 'w')
      try {
        // A file: the profile would replace it and the program's output.
        const r = require('child_process').spawnSync(NODE, [h.CLI, 'record', '-q', '-o', redirected, '-f', 'collapsed', '--', NODE, '-e', 'console.log("ran")'], { cwd, stdio: ['ignore', fd, 'pipe'], encoding: 'utf8' })
        expect(r.status).toBe(2)
        expect(r.stderr).toContain("it is the file this command's standard output goes to, and the program's output there would be lost")
      } finally {
        fs.closeSync(fd)
      }
      expect(fs.readFileSync(redirected, 'utf8')).toBe('')
      // /dev/null is no one's output.
      const toNull = h.cli(['record', '-q', '-o', '/dev/null', '-f', 'collapsed', '--', NODE, '-e', '1'], { cwd })
      expect(toNull.status).toBe(0)
      expect(toNull.stderr).not.toContain('follows the program')
    } finally {
      fs.rmSync(cwd, { recursive: true, force: true })
    }
  })

  test('report into a reader that stops early (| head) ends quietly', () => {
    const r = spawnSync('sh', ['-c', `"${NODE}" "${h.CLI}" report "${machprof}" --top 500 | head -n 2`], {
      encoding: 'utf8',
    })
    expect(r.stdout.split('\n')[0]).toContain('machsampler report')
    expect(r.stderr).not.toMatch(/EPIPE|Error|at /)
  })

  test('names holding terminal escapes are printed escaped, by record and report', () => {
    const script = path.join(dir, 'escapes.js')
    fs.writeFileSync(
      script,
      "const o = {}\no['hot\\x1b[2J\\x1b]0;title\\x07'] = function () { let x = 0; const u = Date.now() + 800; while (Date.now() < u) for (let i = 0; i < 1e4; i++) x += i % 3; return x }\n" +
        "o['hot\\x1b[2J\\x1b]0;title\\x07']()\n",
    )
    const out = path.join(dir, 'escapes.machprof')
    const rec = h.cli(['record', '-o', out, '--', NODE, script])
    expect(rec.status).toBe(0)
    const rep = h.cli(['report', out])
    for (const printed of [rec.stderr, rep.stdout]) {
      expect(printed).toContain('hot\\x1b[2J\\x1b]0;title\\x07')
      expect(printed).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f]/)
    }
  })

  test('report --thread <tid> --by total --top 3', () => {
    const main = ms.loadProfile(machprof).threads.find((t) => t.isMain)
    const r = h.cli(['report', machprof, '--thread', String(main.tid), '--by', 'total', '--top', '3'])
    expect(r.status).toBe(0)
    expect(r.stdout).toContain(`Top 3 functions by total samples (thread ${main.tid};`)
    const threadRows = r.stdout.split('Threads (busiest first;')[1].split('\n\n')[0].trim().split('\n').slice(1)
    expect(threadRows).toHaveLength(2) // header + the main thread
    const fnRows = r.stdout.split('functions by total samples')[1].split('\n\n')[0].trim().split('\n')
    expect(fnRows).toHaveLength(3 + 2) // title rest, header, 3 rows
  })

  test('convert writes the format the extension or --format says', () => {
    const out = path.join(dir, 'converted.data')
    const r = h.cli(['convert', machprof, '-o', out, '--format', 'cpuprofile'])
    expect(r.status).toBe(0)
    expect(JSON.parse(fs.readFileSync(out, 'utf8')).nodes[0].callFrame.functionName).toBe('(root)')
  })
})

describe('--help on every command', () => {
  test.each([
    [['--help'], 'Usage: machsampler <command>'],
    [['help'], 'Usage: machsampler <command>'],
    [['record', '--help'], 'Usage: machsampler record'],
    [['report', '-h'], 'Usage: machsampler report'],
    [['convert', '--help'], 'Usage: machsampler convert'],
    [['help', 'convert'], 'Usage: machsampler convert'],
  ])('%p', (args, first) => {
    const r = h.cli(args)
    expect(r.status).toBe(0)
    expect(r.stdout.startsWith(first)).toBe(true)
    expect(r.stderr).toBe('')
  })

  test('no command at all: usage on stderr, status 2', () => {
    const r = h.cli([])
    expect(r.status).toBe(2)
    expect(r.stderr).toContain('Usage: machsampler <command>')
  })
})

describe('bad input: one line on stderr, a conventional status, nothing left behind', () => {
  const work = path.join(dir, 'bad')
  beforeAll(() => {
    fs.mkdirSync(work)
    fs.writeFileSync(path.join(work, 'garbage.machprof'), 'this is not a profile\n')
    const bytes = fs.readFileSync(machprof)
    fs.writeFileSync(path.join(work, 'truncated.machprof'), bytes.subarray(0, bytes.length >> 1))
    const future = Buffer.from(bytes)
    future.writeUInt32LE(9, 8)
    fs.writeFileSync(path.join(work, 'future.machprof'), future)
    fs.writeFileSync(path.join(work, 'not-executable'), '#!/bin/sh\necho hi\n', { mode: 0o644 })
    fs.writeFileSync(path.join(work, 'a-file'), '')
    fs.writeFileSync(path.join(work, 'graph.html'), '<!DOCTYPE html>\n')
  })

  const W = (f) => path.join(work, f)
  const cases = [
    ['no command after --', ['record', '-o', W('o1.html'), '--'], 2, "no command after '--'"],
    ['no command at all', ['record', '-o', W('o2.html')], 2, 'no command to record'],
    ['unknown record option', ['record', '--frobnicate', '-o', W('o3.html'), '--', NODE, h.BUSY], 2, "unknown option '--frobnicate'"],
    ['unknown report option', ['report', machprof, '--colour'], 2, "unknown option '--colour'"],
    ['unknown convert option', ['convert', machprof, '-o', W('o4.html'), '-z'], 2, "unknown option '-z'"],
    ['unknown command', ['frob'], 2, "unknown command 'frob'"],
    ['option without its value', ['report', machprof, '--top'], 2, "option '--top' needs a value"],
    ['an option given twice', ['report', machprof, '--thread', 'worker', '--thread', 'main'], 2, "option '--thread' given twice ('worker', 'main')"],
    ['bad --interval', ['record', '--interval', '0', '-o', W('o5.html'), '--', NODE, h.BUSY], 2, 'intervalMs must be an integer from 1 to 1000'],
    ['non-numeric --interval', ['record', '--interval', 'fast', '-o', W('o6.html'), '--', NODE, h.BUSY], 2, "option '--interval' takes a decimal number, got 'fast'"],
    ['hexadecimal --interval', ['record', '--interval', '0x10', '-o', W('o6.html'), '--', NODE, h.BUSY], 2, "takes a decimal number, got '0x10'"],
    ['exponent --top', ['report', machprof, '--top', '1e2'], 2, "option '--top' takes a decimal number, got '1e2'"],
    ["'--' as an option's value", ['record', '-o', W('o6.html'), '--interval', '--', NODE, h.BUSY], 2, "option '--interval' needs a value"],
    ['bad --depth', ['record', '--depth', '5000', '-o', W('o7.html'), '--', NODE, h.BUSY], 2, 'maxStackDepth must be an integer from 1 to 1024'],
    ['bad --duration', ['record', '--duration', '-2', '-o', W('o8.html'), '--', NODE, h.BUSY], 2, '--duration must be between 0.001 and 1000000000 seconds'],
    ['contradicting options', ['record', '--perf-map', '--no-jit-names', '-o', W('o8b.html'), '--', NODE, h.BUSY], 2, '--perf-map and --no-jit-names contradict each other'],
    ['--duration too long for start()', ['record', '--duration', '99999999999', '-o', W('o8.html'), '--', NODE, h.BUSY], 2, "--duration must be between 0.001 and 1000000000 seconds, got '99999999999'"],
    ['bad --checkpoint', ['record', '--checkpoint', '0.05', '-o', W('o8c.html'), '--', NODE, h.BUSY], 2, "--checkpoint must be 0 (none) or between 0.1 and 86400 seconds, got '0.05'"],
    ['--duration below a millisecond', ['record', '--duration', '0.0001', '-o', W('o8.html'), '--', NODE, h.BUSY], 2, "got '0.0001'"],
    ['unknown format', ['record', '-f', 'gif', '-o', W('o9.html'), '--', NODE, h.BUSY], 2, "unknown format 'gif'"],
    ['unknown extension', ['record', '-o', W('o10.json'), '--', NODE, h.BUSY], 2, 'cannot tell the format'],
    ['output directory missing', ['record', '-o', W('missing/o11.html'), '--', NODE, h.BUSY], 1, 'no such directory'],
    ['output through a missing directory and ..', ['record', '-o', `${work}/missing/../o11b.html`, '--', NODE, h.BUSY], 1, 'no such directory'],
    ['output under a file', ['record', '-o', W('a-file/o12.html'), '--', NODE, h.BUSY], 1, 'not a directory'],
    ['output is a directory', ['record', '-o', work, '-f', 'html', '--', NODE, h.BUSY], 1, 'is a directory'],
    ['convert to a missing directory', ['convert', machprof, '-o', W('missing/o13.pb.gz')], 1, 'cannot write'],
    ['missing input', ['report', W('nope.machprof')], 1, 'no such file or directory'],
    ['missing input to convert', ['convert', W('nope.machprof'), '-o', W('o14.html')], 1, 'no such file or directory'],
    ['corrupt input', ['report', W('garbage.machprof')], 1, 'not a machsampler profile'],
    ['truncated input', ['convert', W('truncated.machprof'), '-o', W('o15.html')], 1, 'truncated'],
    ['future version', ['report', W('future.machprof')], 1, 'format version 9 is newer'],
    ['a flame graph given as input', ['report', W('graph.html')], 1, 'only .machprof files'],
    ['unknown thread', ['report', machprof, '--thread', 'no-such-thread'], 1, 'threads are'],
    ['command not found', ['record', '-o', W('o16.html'), '--', W('no-such-command')], 127, 'command not found'],
    ['command not executable', ['record', '-o', W('o17.html'), '--', W('not-executable')], 126, 'permission denied'],
    // No profile: a failure, with the program's own status if it failed.
    ['not a Node program', ['record', '-o', W('o18.html'), '--', 'true'], 1, 'no profile was recorded'],
    ['not a Node program that fails', ['record', '-o', W('o19.html'), '--', 'sh', '-c', 'exit 3'], 3, 'no profile was recorded'],
  ]

  test.each(cases.map((c) => [c[0], c]))('%s', (_, [, args, status, message]) => {
    const before = h.listDir(work)
    const r = h.cli(args)
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status, stderr: expect.stringContaining(message) })
    const lines = r.stderr.trimEnd().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^machsampler: /)
    expect(r.stderr).not.toMatch(/\n\s+at /)
    // The program never ran for errors found up front, and no file (nor
    // a temporary one) appeared.
    expect(r.stdout).not.toContain('ready')
    expect(h.listDir(work)).toEqual(before)
  })
})

describe('record when the profile cannot be written after the run', () => {
  test("the recording is kept in the current directory, and the status is the program's", () => {
    const cwd = h.tmpdir('kept')
    const out = path.join(cwd, 'gone', 'x.machprof')
    fs.mkdirSync(path.dirname(out))
    // The program removes the output's directory, then fails with 3.
    const program = `require('fs').rmSync(${JSON.stringify(path.dirname(out))}, { recursive: true }); process.exitCode = 3`
    const r = h.cli(['record', '-q', '-o', out, '--', NODE, '-e', program], { cwd })
    expect(r.status).toBe(3)
    const lines = r.stderr.trimEnd().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^machsampler: cannot write .*no such directory; the recording was kept in (\S+\.machprof);/)
    const kept = /kept in (\S+\.machprof);/.exec(lines[0])[1]
    expect(path.dirname(kept)).toBe(fs.realpathSync(cwd))
    expect(ms.loadProfile(kept).samples.thread.length).toBeGreaterThan(0)
    fs.rmSync(cwd, { recursive: true, force: true })
  })
})

test("report rows: a name's line breaks and control characters are shown as escapes", () => {
  const { clip, printable } = require('../lib/cli/text')
  expect(printable(clip('new\nline\r\x1b[31m'))).toBe('new\\nline\\r\\x1b[31m')
  expect(clip('x'.repeat(300))).toHaveLength(110)
})
