#!/usr/bin/env node
'use strict'
// machsampler's reliability suite (issue 7): `npm run stress` (about 10
// minutes), `npm run stress:quick` (CI, a few minutes).
//
// Each scenario is a script in stress/scenarios/ that runs in a process
// group of its own and reports over stdout (see lib/child.js). This
// process is the watchdog: a scenario that reports no progress for 5 s
// (or runs past its time limit) is a hang; it is then described (threads,
// wait channels, gdb backtraces into stress/results/) and killed. A
// scenario that dies without a result is a crash. Wrong results are the
// scenario's own checks that failed. Every scenario is bounded in time and
// count and stops by itself.
//
// Writes stress/results/latest.json and prints a table. Exits 1 unless
// crashes, hangs and wrong results are all 0.
//
// Options:
//   --quick            the CI sizes
//   --only a,b         run only these scenarios (names or prefixes)
//   --skip a,b         leave these out
//   --sanitizers       the sanitizer pass instead: Rust tests under
//                      AddressSanitizer/LeakSanitizer, one scenario and
//                      1000 start/stop cycles under valgrind
//   --strict           count checks broken by known bugs (lib/child.js
//                      KNOWN_BUGS) as wrong results too
//   --node <path>      run the scenarios' Node processes with this binary
//   --json <path>      also write the JSON report there
//   --list             print the scenarios and exit

const { spawn, spawnSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { PREFIX, KNOWN_BUGS } = require('./lib/child')

const ROOT = path.join(__dirname, '..')
const RESULTS = path.join(__dirname, 'results')
const HANG_MS = 5000

// quick: CI sizes; full: `npm run stress`. `hangMs` overrides the 5 s
// watchdog where a scenario legitimately waits on something that is not
// the sampled process (a compiler, npm, valgrind). `limitS` is the hard cap.
const SCENARIOS = [
  {
    name: 'alloc-check-armed',
    what: 'the allocation detector fires when the handler allocates (fault injection), so a clean storm means something',
    quick: {},
    full: {},
    limitS: 60,
  },
  {
    name: 'alloc-storm',
    what: '8 worker_threads + main thread: Buffer allocations and big JSON at 1 kHz, MACHSAMPLER_ALLOC_CHECK=1, start/stop churn',
    env: { MACHSAMPLER_ALLOC_CHECK: '1' },
    quick: { seconds: 12, churnMs: 1000 },
    full: { seconds: 60, churnMs: 1000 },
    limitS: 150,
  },
  {
    name: 'thread-churn',
    what: '~1000 worker_threads per minute: normal exits, terminate() mid-work, workers that load the addon and exit',
    quick: { seconds: 15, perMinute: 1000 },
    full: { seconds: 60, perMinute: 1000 },
    limitS: 150,
  },
  {
    name: 'alloc-storm+stalls',
    file: 'alloc-storm',
    what: 'alloc-storm with watchStalls on throughout: no stall reported that the loop did not have, history memory flat',
    env: { MACHSAMPLER_ALLOC_CHECK: '1' },
    quick: { seconds: 12, churnMs: 1000, stalls: true },
    full: { seconds: 60, churnMs: 1000, stalls: true },
    limitS: 150,
  },
  {
    name: 'thread-churn+stalls',
    file: 'thread-churn',
    what: 'thread-churn with watchStalls on throughout: no stall reported that the loop did not have, history memory flat',
    quick: { seconds: 15, perMinute: 1000, stalls: true },
    full: { seconds: 60, perMinute: 1000, stalls: true },
    limitS: 150,
  },
  {
    name: 'start-stop-churn',
    what: 'start/stop cycles from JS while workers run; stop() racing thread exit; start/stop from workers',
    quick: { cycles: 1500, maxSeconds: 150 },
    full: { cycles: 10000, maxSeconds: 330 },
    limitS: 420,
  },
  {
    name: 'signals-syscalls',
    what: 'blocking syscalls at 1 kHz (FIFO readSync/writeSync, sockets, Atomics.wait, execSync, sleep) and the process\'s own signal handlers',
    quick: { rounds: 2 },
    full: { rounds: 10 },
    limitS: 240,
  },
  {
    name: 'coexistence',
    what: '--cpu-prof, inspector Profiler, --prof, a second copy of the addon, perf record',
    quick: { seconds: 2 },
    full: { seconds: 5 },
    limitS: 300,
  },
  {
    name: 'lifecycle',
    what: 'process.exit(), uncaught exception, abort(), worker exits, the CLI on each; fork/spawn/exec loops while sampling',
    quick: { loops: 60 },
    full: { loops: 400 },
    // Its steps are whole child processes (each with its own time limit,
    // up to 60 s for a CLI run): a step may take longer than the default
    // watchdog on a loaded machine without anything hanging.
    hangMs: 60000,
    limitS: 400,
  },
  {
    name: 'real-suite',
    what: "qs's own tape suite, untouched, with and without the sampler preloaded at 1 kHz",
    quick: { runs: 2 },
    full: { runs: 12 },
    hangMs: 180000,
    limitS: 900,
  },
  {
    name: 'repros',
    what: 'the reproducers of stress/repro/ (execve with a pending signal, foreign stacks, EINTR, sigwait threads, group signals, ...): each must say "not reproduced"',
    quick: {},
    full: { full: true },
    hangMs: 60000,
    limitS: 1500,
  },
  {
    name: 'bad-input-js',
    what: 'every JS entry point with wrong types, out-of-range values, null/undefined, huge numbers, extra arguments, mangled profiles',
    quick: { mutations: 1500 },
    full: { mutations: 20000 },
    limitS: 400,
  },
  {
    name: 'bad-input-cli',
    what: 'every CLI command with missing, corrupt, truncated, future-version profiles and unwritable output',
    quick: { flips: 20, cuts: 12 },
    full: { flips: 100, cuts: 40 },
    limitS: 600,
  },
  {
    name: 'walker-fuzz',
    what: 'proptest over walk_stack and the CFI unwinder, stacks between PROT_NONE guard pages (tests/walker_fuzz.rs, tests/unwind_fuzz.rs)',
    quick: { cases: 5000, profile: 'dev' },
    full: { cases: 400000, profile: 'release' },
    hangMs: 600000,
    limitS: 1500,
  },
]

const SANITIZER_SCENARIOS = [
  {
    name: 'asan-rust-tests',
    what: 'cargo +nightly test (lib + walker fuzz) built with -Zsanitizer=address (ASan + LeakSanitizer)',
    quick: { cases: 2000 },
    full: { cases: 20000 },
    hangMs: 900000,
    limitS: 2400,
  },
  {
    name: 'valgrind-cycles',
    what: 'valgrind memcheck: 1000 start/stop cycles at 1 kHz with a worker, leaks attributed to the addon; plus one stress scenario',
    quick: { cycles: 1000, stormSeconds: 4 },
    full: { cycles: 1000, stormSeconds: 10 },
    hangMs: 600000,
    limitS: 2400,
  },
]

function parseArgs(argv) {
  const o = { quick: false, only: null, skip: [], sanitizers: false, node: process.execPath, list: false, strict: false }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--quick') o.quick = true
    else if (a === '--sanitizers') o.sanitizers = true
    else if (a === '--list') o.list = true
    else if (a === '--strict') o.strict = true
    else if (a === '--only') o.only = argv[++i].split(',')
    else if (a === '--skip') o.skip = argv[++i].split(',')
    else if (a === '--node') o.node = path.resolve(argv[++i])
    else if (a === '--json') o.json = path.resolve(argv[++i])
    else {
      process.stderr.write(`stress: unknown option '${a}'\n`)
      process.exit(2)
    }
  }
  return o
}

const matches = (name, list) => list.some((p) => name === p || name.startsWith(p))

/** pid -> { ppid, pgrp } for every process, from /proc. */
function processTable() {
  const table = new Map()
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      table.set(Number(pid), { ppid: Number(f[1]), pgrp: Number(f[2]) })
    } catch {
      // Gone meanwhile.
    }
  }
  return table
}

/**
 * The scenario's processes: its process group plus every descendant
 * (grandchildren run in groups of their own so that the scenario can kill
 * them on a time-out).
 */
function scenarioProcesses(root) {
  const table = processTable()
  const out = new Set([root])
  let grew = true
  while (grew) {
    grew = false
    for (const [pid, p] of table) {
      if (!out.has(pid) && (out.has(p.ppid) || p.pgrp === root)) {
        out.add(pid)
        grew = true
      }
    }
  }
  return [...out].filter((pid) => table.has(pid))
}

function killAll(root) {
  for (const pid of scenarioProcesses(root)) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
  }
  try {
    process.kill(-root, 'SIGKILL')
  } catch {}
}

/** Threads of every process of the scenario, for a hang report. */
function describeProcesses(root) {
  const lines = []
  const read = (f) => {
    try {
      return fs.readFileSync(f, 'utf8').trim()
    } catch {
      return '?'
    }
  }
  for (const pid of scenarioProcesses(root)) {
    lines.push(`process ${pid}: ${read(`/proc/${pid}/cmdline`).split('\0').join(' ').slice(0, 200)}`)
    let tasks = []
    try {
      tasks = fs.readdirSync(`/proc/${pid}/task`)
    } catch {}
    for (const tid of tasks) {
      const ts = read(`/proc/${pid}/task/${tid}/stat`)
      const state = ts.slice(ts.lastIndexOf(')') + 2).split(' ')[0]
      lines.push(
        `  ${tid} ${read(`/proc/${pid}/task/${tid}/comm`)} state=${state} wchan=${read(`/proc/${pid}/task/${tid}/wchan`)} syscall=${read(`/proc/${pid}/task/${tid}/syscall`).split(' ')[0]}`,
      )
    }
    if (fs.existsSync('/usr/bin/gdb')) {
      const g = spawnSync('gdb', ['-p', String(pid), '-batch', '-nx', '-ex', 'thread apply all bt 25'], {
        encoding: 'utf8',
        timeout: 30000,
      })
      lines.push(`  gdb:\n${(g.stdout || '').split('\n').filter((l) => /^#|^Thread/.test(l)).join('\n')}`)
    }
  }
  return lines.join('\n')
}

function runScenario(s, opts) {
  const options = { ...(opts.quick ? s.quick : s.full), quick: opts.quick, node: opts.node }
  const file = path.join(__dirname, 'scenarios', `${s.file || s.name}.js`)
  const started = Date.now()
  const hangMs = s.hangMs || HANG_MS
  return new Promise((resolve) => {
    const child = spawn(opts.node, [file, JSON.stringify(options)], {
      cwd: ROOT,
      // The allocation check is armed in every scenario and in everything
      // it runs (env is inherited): an allocation while a thread is
      // stopped aborts the process, a crash here.
      env: { ...process.env, MACHSAMPLER_ALLOC_CHECK: '1', ...(s.env || {}) },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group, so a hang kills grandchildren too
    })
    const out = {
      name: s.name,
      status: 'ok',
      samples: 0,
      checks: 0,
      crashes: 0,
      hangs: 0,
      wrong: 0,
      known: 0,
      knownBugs: {},
      wrongResults: [],
      hangReports: [],
      ms: 0,
      info: {},
      exit: null,
    }
    let result = null
    let lastProgress = Date.now()
    let lastNote = ''
    let stderr = ''
    let buf = ''
    let killedFor = null
    child.stdout.on('data', (d) => {
      buf += d
      let i
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i)
        buf = buf.slice(i + 1)
        if (!line.startsWith(PREFIX)) continue
        let m
        try {
          m = JSON.parse(line.slice(PREFIX.length))
        } catch {
          continue
        }
        lastProgress = Date.now()
        if (m.type === 'progress') lastNote = m.note || lastNote
        else if (m.type === 'result') result = m
        else if (m.type === 'wrong') process.stdout.write(`  [${s.name}] WRONG: ${m.msg}\n`)
        else if (m.type === 'hang') process.stdout.write(`  [${s.name}] HANG: ${m.what}\n`)
      }
    })
    child.stderr.on('data', (d) => {
      stderr += d
      if (stderr.length > 1 << 20) stderr = stderr.slice(-(1 << 19))
    })
    const timer = setInterval(() => {
      const now = Date.now()
      let why = null
      if (now - lastProgress > hangMs) why = `no progress for ${((now - lastProgress) / 1000).toFixed(1)} s (last: ${lastNote || 'none'})`
      else if (now - started > s.limitS * 1000) why = `still running after its ${s.limitS} s limit`
      if (!why || killedFor) return
      killedFor = why
      const report = describeProcesses(child.pid)
      const file = path.join(RESULTS, `hang-${s.name}-${process.pid}.txt`)
      try {
        fs.writeFileSync(file, `${why}\n\n${report}\n\nstderr:\n${stderr.slice(-20000)}\n`)
      } catch {}
      out.hangReports.push({ why, file: path.relative(ROOT, file) })
      process.stdout.write(`  [${s.name}] HANG: ${why}; threads and backtraces in ${path.relative(ROOT, file)}\n`)
      killAll(child.pid)
    }, 250)
    child.on('close', (code, signal) => {
      clearInterval(timer)
      out.ms = Date.now() - started
      out.exit = { code, signal }
      if (result) {
        out.samples = result.samples
        out.checks = result.checks
        out.wrong = result.wrongCount
        out.wrongResults = result.wrong
        out.info = result.info
        out.hangs = result.hangs.length
        out.knownBugs = result.known || {}
        out.known = Object.values(out.knownBugs).reduce((a, k) => a + k.count, 0)
        if (opts.strict) out.wrong += out.known
        for (const h of result.hangs) out.hangReports.push({ why: h })
      }
      if (killedFor) {
        out.hangs++
      } else if (!result || code !== 0) {
        out.crashes++
        out.crash = { code, signal, stderr: stderr.slice(-4000) }
        process.stdout.write(`  [${s.name}] CRASH: exit ${code} signal ${signal}\n${indent(stderr.slice(-2000))}\n`)
      }
      // Leave no stray process of the scenario behind.
      killAll(child.pid)
      out.status = out.crashes ? 'CRASH' : out.hangs ? 'HANG' : out.wrong ? 'WRONG' : 'ok'
      resolve(out)
    })
  })
}

function indent(s) {
  return s
    .split('\n')
    .map((l) => `      ${l}`)
    .join('\n')
}

function pad(s, n, right = false) {
  s = String(s)
  return right ? s.padStart(n) : s.padEnd(n)
}

function table(rows, totals) {
  const head = ['scenario', 'status', 'time s', 'samples', 'checks', 'crashes', 'hangs', 'wrong', 'known']
  const w = [20, 7, 8, 12, 10, 8, 6, 6, 6]
  const line = (cells) => cells.map((c, i) => pad(c, w[i], i >= 2)).join('  ')
  const out = [line(head), line(w.map((n) => '-'.repeat(n)))]
  for (const r of rows) out.push(line([r.name, r.status, (r.ms / 1000).toFixed(1), r.samples, r.checks, r.crashes, r.hangs, r.wrong, r.known]))
  out.push(line(w.map((n) => '-'.repeat(n))))
  out.push(
    line([`${totals.scenarios} scenarios`, totals.ok ? 'ok' : 'FAIL', (totals.ms / 1000).toFixed(1), totals.samples, totals.checks, totals.crashes, totals.hangs, totals.wrong, totals.known]),
  )
  return out.join('\n')
}

async function main() {
  const opts = parseArgs(process.argv.slice(2))
  let list = opts.sanitizers ? SANITIZER_SCENARIOS : SCENARIOS
  if (opts.list) {
    for (const s of [...SCENARIOS, ...SANITIZER_SCENARIOS]) process.stdout.write(`${pad(s.name, 20)} ${s.what}\n`)
    return 0
  }
  if (opts.only) list = [...SCENARIOS, ...SANITIZER_SCENARIOS].filter((s) => matches(s.name, opts.only))
  list = list.filter((s) => !matches(s.name, opts.skip))
  if (list.length === 0) {
    process.stderr.write('stress: no scenario selected (see --list)\n')
    return 2
  }
  fs.mkdirSync(RESULTS, { recursive: true })
  const addon = path.join(ROOT, `machsampler.${process.platform}-${process.arch === 'x64' ? 'x64' : process.arch}-gnu.node`)
  if (process.platform === 'linux' && !fs.existsSync(addon)) {
    process.stderr.write(`stress: ${path.relative(ROOT, addon)} is missing; run 'npm run build' first\n`)
    return 2
  }
  const mode = opts.sanitizers || list.every((s) => SANITIZER_SCENARIOS.includes(s)) ? 'sanitizers' : opts.quick ? 'quick' : 'full'
  process.stdout.write(`machsampler stress (${mode}), node ${spawnSync(opts.node, ['--version'], { encoding: 'utf8' }).stdout.trim()}, ${os.cpus().length} CPUs\n`)
  const started = Date.now()
  const rows = []
  for (const s of list) {
    process.stdout.write(`- ${s.name}: ${s.what}\n`)
    const r = await runScenario(s, opts)
    rows.push(r)
    // Per scenario too, so a partial run (--only) keeps earlier results.
    fs.writeFileSync(path.join(RESULTS, `${s.name}.${mode}.json`), JSON.stringify(r, null, 2) + '\n')
    const extra = Object.keys(r.info).length ? ` ${JSON.stringify(r.info).slice(0, 400)}` : ''
    process.stdout.write(`  ${r.status} in ${(r.ms / 1000).toFixed(1)} s: ${r.samples} samples, ${r.checks} checks${extra}\n`)
  }
  const sum = (k) => rows.reduce((a, r) => a + r[k], 0)
  const totals = {
    scenarios: rows.length,
    samples: sum('samples'),
    checks: sum('checks'),
    crashes: sum('crashes'),
    hangs: sum('hangs'),
    wrong: sum('wrong'),
    known: sum('known'),
    ms: Date.now() - started,
  }
  const knownBugs = {}
  for (const r of rows) {
    for (const [id, k] of Object.entries(r.knownBugs)) {
      const e = (knownBugs[id] ||= { description: KNOWN_BUGS[id], count: 0, scenarios: [], example: k.example })
      e.count += k.count
      e.scenarios.push(r.name)
    }
  }
  totals.ok = totals.crashes === 0 && totals.hangs === 0 && totals.wrong === 0
  const report = {
    mode,
    date: new Date().toISOString(),
    node: spawnSync(opts.node, ['--version'], { encoding: 'utf8' }).stdout.trim(),
    platform: `${process.platform}-${process.arch}`,
    cpus: os.cpus().length,
    commit: spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).stdout.trim(),
    totals,
    knownBugs,
    scenarios: rows,
  }
  const json = JSON.stringify(report, null, 2) + '\n'
  fs.writeFileSync(path.join(RESULTS, 'latest.json'), json)
  fs.writeFileSync(path.join(RESULTS, `${mode}.json`), json)
  if (opts.json) fs.writeFileSync(opts.json, json)
  let notes = ''
  for (const [id, k] of Object.entries(knownBugs)) {
    notes += `\nKNOWN BUG ${id} (${k.count} checks, in ${k.scenarios.join(', ')}${opts.strict ? '; counted as wrong: --strict' : '; not counted: see --strict'}):\n  ${k.description}\n  e.g. ${k.example}\n`
  }
  process.stdout.write(`\n${table(rows, totals)}\n${notes}\nwrote ${path.relative(ROOT, path.join(RESULTS, 'latest.json'))}\n`)
  return totals.ok ? 0 : 1
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (e) => {
    process.stderr.write(`stress: ${e.stack}\n`)
    process.exitCode = 1
  },
)
