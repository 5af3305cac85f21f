'use strict'
// Process lifecycle while sampling at 1 kHz with busy workers, each in CPU
// mode and in wall mode:
// - process.exit(7), an uncaught exception, an unhandled rejection: exit
//   promptly with the right code; process.abort(): SIGABRT, not a hang;
//   process.exit() from the main thread while a worker is inside
//   start()/stop(); a worker's own process.exit();
// - the same endings under the CLI (`machsampler record -o out.machprof
//   -- node app.js`): the exit status passes through and the profile is
//   written (except after abort, where nothing can be: then a clean
//   message), with no temporary files left behind;
// - fork/spawn/exec/execFileSync/spawnSync loops keep working, with the
//   right output, while the parent is sampled (sessions alternate modes);
// - children get no timers and no signals: a fork()ed copy of a sampled
//   thread (no exec; in CPU mode that thread has a CPU-time timer) burns
//   CPU with counters on SIGURG and every real-time signal and must count
//   none, and an exec'd child must start with no POSIX timer and with no
//   sampling signal pending, blocked or ignored.

const fs = require('fs')
const path = require('path')
const cp = require('child_process')
const { main, progress } = require('../lib/child')
const { Sampling, ms } = require('../lib/sampler')
const { weightSum, checkProfile } = require('../lib/check')
const { probe, posixTimers } = require('../lib/probe')
const { run, describe, tmpdir, ROOT, ADDON } = require('../lib/proc')

const PRELUDE = `
const ms = require(${JSON.stringify(ADDON)})
const { Worker } = require('worker_threads')
for (let i = 0; i < 2; i++) new Worker('let x = 0; for (;;) x += JSON.stringify({ x }).length', { eval: true }).unref()
const spin = (t) => { const e = Date.now() + t; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1); return x }
`

// The same endings as plain programs (they start the sampler) and as CLI
// targets (the CLI's preload starts it; SAMPLE=0 leaves start() out).
const ENDINGS = {
  exit: { src: `spin(400); process.exit(7)`, code: 7 },
  throw: { src: `spin(400); throw new Error('planned uncaught exception')`, code: 1, stderr: /planned uncaught exception/ },
  reject: { src: `spin(400); Promise.reject(new Error('planned rejection'))`, code: 1, stderr: /planned rejection/ },
  abort: { src: `spin(400); process.abort()`, signal: 'SIGABRT' },
  normal: { src: `spin(400)`, code: 0, exitWorkers: true },
  sigterm: { src: `spin(400); process.kill(process.pid, 'SIGTERM'); setInterval(() => {}, 1000)`, signal: 'SIGTERM' },
  // Exit from the main thread while a worker churns start()/stop().
  exitDuringStop: {
    src: `
const w = new Worker(\`
  const ms = require(${JSON.stringify(ADDON)})
  const { parentPort } = require('worker_threads')
  parentPort.postMessage('go')
  for (;;) { try { ms.start({ intervalMs: 1 }) } catch {} try { ms.stop() } catch {} }\`, { eval: true })
w.once('message', () => setTimeout(() => process.exit(5), 50 + Math.floor(Math.random() * 100)))`,
    code: 5,
    noStart: true,
  },
  // A worker that calls process.exit() ends only itself.
  workerExit: {
    src: `
const w = new Worker('const ms = require(${JSON.stringify(ADDON)}); ms.stats(); process.exit(9)', { eval: true })
w.on('exit', (code) => { spin(100); const p = ms.stop(); console.log('worker-exit', code, p.stats.samplesCaptured); process.exit(0) })`,
    code: 0,
    stdout: /worker-exit 9 \d+/,
  },
}

function program(ending, { sample, mode }) {
  const e = ENDINGS[ending]
  return `${PRELUDE}\n${sample && !e.noStart ? `ms.start({ intervalMs: 1, mode: '${mode}' })` : ''}\n${e.src}\n`
}

const MODES = ['cpu', 'wall']

/**
 * Signals in a /proc/<pid>/status mask line (SigPnd, ShdPnd, SigBlk,
 * SigIgn, SigCgt) that the sampler could use: SIGURG and the real-time
 * ones.
 */
function samplingSignalsIn(status, field) {
  const m = new RegExp(`^${field}:\\s+(\\w+)`, 'm').exec(status)
  if (!m) return null
  const { urg, rtmin, rtmax } = probe().signals()
  const mask = BigInt('0x' + m[1])
  const out = []
  for (let s = 1; s <= 64; s++) if ((mask >> BigInt(s - 1)) & 1n && (s === urg || (s >= rtmin && s <= rtmax))) out.push(s)
  return out
}

// An exec'd child's view of itself: its POSIX timers and signal masks.
const EXEC_CHILD = `
const fs = require('fs')
let timers = null
try { timers = fs.readFileSync('/proc/self/timers', 'utf8') } catch {}
console.log(JSON.stringify({ timers, status: fs.readFileSync('/proc/self/status', 'utf8') }))
`

/** Rejects if `p` takes longer than `ms`: a hang of what it waits for. */
function within(p, ms, what) {
  let t
  return Promise.race([p, new Promise((_, rej) => (t = setTimeout(() => rej(new Error(`${what}: no answer after ${ms} ms`)), ms)))]).finally(() => clearTimeout(t))
}

function shellWrap(node, file) {
  // No core files from abort().
  return ['sh', ['-c', 'ulimit -c 0; exec "$@"', 'sh', node, file]]
}

main(async (o, c) => {
  const node = o.node || process.execPath
  const dir = tmpdir('life')
  c.info.plain = {}
  c.info.cli = {}

  // 1. Plain programs.
  for (const mode of MODES) {
    for (const name of Object.keys(ENDINGS)) {
      const e = ENDINGS[name]
      const what = `${name} (${mode} mode)`
      const file = path.join(dir, `${name}-${mode}.js`)
      fs.writeFileSync(file, program(name, { sample: true, mode }))
      const [cmd, args] = shellWrap(node, file)
      const r = await run(cmd, args, { timeoutMs: 20000, cwd: dir, note: `plain ${what}` })
      c.ok(!r.timedOut, `${what}: hung (killed after 20 s)`)
      const want = e.signal ? { signal: e.signal } : { code: e.code }
      const got = e.signal ? { signal: r.signal } : { code: r.code }
      // sh -c exec keeps the pid, so the signal is the process's own.
      c.eq(got, want, `${what}: how it ended (${describe(r)})`)
      if (e.stderr) c.ok(e.stderr.test(r.stderr), `${what}: stderr lacks ${e.stderr}`)
      if (e.stdout) c.ok(e.stdout.test(r.stdout), `${what}: stdout lacks ${e.stdout}: ${r.stdout.trim()}`)
      c.info.plain[what] = `${r.signal || r.code} in ${r.ms} ms`
      progress(`plain ${what}`)
    }
  }

  // 2. The same under the CLI, at 1 kHz.
  const cli = path.join(ROOT, 'bin', 'machsampler.js')
  for (const [name, mode] of MODES.flatMap((m) => ['normal', 'exit', 'throw', 'reject', 'sigterm', 'abort'].map((n) => [n, m]))) {
    const e = ENDINGS[name]
    const what = `CLI ${name} (${mode} mode)`
    const work = fs.mkdtempSync(path.join(dir, `cli-${name}-`))
    const file = path.join(work, 'app.js')
    fs.writeFileSync(file, program(name, { sample: false }))
    const out = path.join(work, 'out', 'profile.machprof')
    fs.mkdirSync(path.dirname(out))
    const r = await run(node, [cli, 'record', '-q', '--interval', '1', '--mode', mode, '-o', out, '--', 'sh', '-c', 'ulimit -c 0; exec "$@"', 'sh', node, file], {
      timeoutMs: 60000,
      cwd: work,
      note: what,
    })
    c.ok(!r.timedOut, `${what}: hung`)
    const status = e.signal ? 128 + require('os').constants.signals[e.signal] : e.code
    c.eq(r.code, status, `${what}: exit status (${describe(r)})`)
    const files = fs.readdirSync(path.dirname(out))
    if (name === 'abort') {
      // abort() runs no exit handler, so there is no profile: the CLI
      // must say so in one line and leave nothing behind.
      c.eq(files, [], `${what}: files left in the output directory`)
      const lines = r.stderr.trim().split('\n').filter((l) => l.startsWith('machsampler:'))
      c.ok(lines.length === 1 && /no profile was recorded/.test(lines[0]), `${what}: message ${JSON.stringify(r.stderr.slice(-300))}`)
    } else {
      c.eq(files, ['profile.machprof'], `${what}: output directory`)
      if (files.includes('profile.machprof')) {
        try {
          const p = ms.loadProfile(out)
          const n = weightSum(p)
          c.samples += n
          // 400 ms of the main thread and two workers spinning: in CPU
          // mode about their CPU time in ms, in wall mode a sample a tick.
          c.ok(n > 100, `${what}: only ${n} samples`)
          c.eq(checkProfile(p, { mode }), 'ok', `${what}: the profile`)
          c.ok(p.symbols && p.symbols.functions.name.length > 0, `${what}: the profile has no names`)
          c.info.cli[what] = `${r.code}, ${n} samples in ${p.samples.thread.length} rows`
        } catch (err) {
          c.ok(false, `${what}: the profile does not load: ${err.code} ${err.message}`)
        }
      }
    }
    fs.rmSync(work, { recursive: true, force: true })
    progress(what)
  }

  // 3. fork/spawn/exec loops while this process is sampled.
  const loops = o.loops ?? 60
  const sampling = new Sampling(c, { intervalMs: 1, churnMs: 1000, mode: 'alternate', what: 'lifecycle loops' })
  const child = path.join(dir, 'echo-child.js')
  fs.writeFileSync(child, `process.on('message', (m) => { process.send({ back: m.n * 2 }); process.disconnect() })`)
  const counts = { fork: 0, spawn: 0, exec: 0, execFileSync: 0, spawnSync: 0 }
  for (let i = 0; i < loops; i++) {
    const kind = Object.keys(counts)[i % 5]
    try {
      if (kind === 'fork') {
        const f = cp.fork(child, [], { execPath: node, stdio: 'ignore' })
        f.send({ n: i })
        // Both listeners up front: 'exit' may come before the message.
        const back = new Promise((res) => f.once('message', res))
        const code = new Promise((res, rej) => {
          f.once('exit', res)
          f.once('error', rej)
        })
        const got = await within(Promise.all([back, code]), 20000, `fork #${i}`)
        c.eq([got[0].back, got[1]], [i * 2, 0], `fork #${i}`)
      } else if (kind === 'spawn') {
        const s = cp.spawn('sh', ['-c', `echo spawn-${i}`])
        let out = ''
        s.stdout.on('data', (d) => (out += d))
        const code = await within(new Promise((res) => s.on('close', res)), 20000, `spawn #${i}`)
        c.eq([out, code], [`spawn-${i}\n`, 0], `spawn #${i}`)
      } else if (kind === 'exec') {
        const out = await within(new Promise((res, rej) => cp.exec(`echo $((${i} * 3))`, (e, so) => (e ? rej(e) : res(so)))), 20000, `exec #${i}`)
        c.eq(out, `${i * 3}\n`, `exec #${i}`)
      } else if (kind === 'execFileSync') {
        const out = cp.execFileSync(node, ['-e', `process.stdout.write(String(${i} + 1))`]).toString()
        c.eq(out, String(i + 1), `execFileSync #${i}`)
      } else {
        const r = cp.spawnSync('sh', ['-c', `echo $1; exit 4`, 'sh', `sync-${i}`], { encoding: 'utf8' })
        c.eq([r.stdout, r.status], [`sync-${i}\n`, 4], `spawnSync #${i}`)
      }
      counts[kind]++
    } catch (e) {
      c.ok(false, `${kind} #${i} threw ${e.code}: ${e.message}`)
    }
    progress(`${kind} #${i}`)
  }
  sampling.stop()
  c.info.loops = counts

  // 4. Children get no timers and no sampling signals, in each mode, with
  // busy workers sampled too. fork() copies the calling thread only; POSIX
  // timers and pending signals are not inherited, and nothing of the
  // sampler runs in the copy: any signal it counts came from a timer or a
  // sampler that should not be there.
  const forks = o.forks ?? 6
  const spinner = (x) => `const e = Date.now() + ${x}; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1)`
  c.info.children = {}
  for (const mode of MODES) {
    const { Worker } = require('worker_threads')
    const workers = [0, 1].map(() => new Worker('let x = 0; for (;;) x += Math.sqrt(x + 1)', { eval: true }))
    const s = new Sampling(c, { intervalMs: 1, mode, what: `children (${mode} mode)` })
    // This thread's timer is set (Sampling waits for it in CPU mode); let
    // it run a little so the sampler is in its stride.
    eval(spinner(50))
    const got = []
    for (let i = 0; i < forks; i++) {
      const r = probe().forkAndCount(150)
      got.push(r)
      c.ok(r.complete && r.exitCode === 0 && r.termSignal === 0, `fork #${i} (${mode} mode): the child ended with ${r.exitCode}/${r.termSignal}, report ${r.complete ? 'complete' : 'incomplete'}`)
      c.ok(r.count === 0, () => `fork #${i} (${mode} mode): the fork()ed child caught ${r.count} sampling signal(s) in ${r.cpuMs.toFixed(0)} ms of CPU: ${JSON.stringify(r.bySignal)}`)
      c.ok(r.cpuMs >= 150, `fork #${i} (${mode} mode): the child burned only ${r.cpuMs} ms of CPU`)
      const ex = cp.spawnSync(node, ['-e', EXEC_CHILD], { encoding: 'utf8', timeout: 20000 })
      let view = null
      try {
        view = JSON.parse(ex.stdout)
      } catch {}
      c.ok(ex.status === 0 && view, `exec'd child #${i} (${mode} mode): ${ex.status} ${ex.signal} ${ex.stderr.slice(-200)}`)
      if (view) {
        // A kernel without /proc/<pid>/timers cannot be asked.
        if (view.timers !== null) c.eq(view.timers.trim(), '', `exec'd child #${i} (${mode} mode): its POSIX timers`)
        for (const field of ['SigPnd', 'ShdPnd', 'SigBlk', 'SigIgn']) c.eq(samplingSignalsIn(view.status, field), [], `exec'd child #${i} (${mode} mode): sampling signals in ${field}`)
      }
      progress(`children ${mode} #${i}`)
    }
    // The parent really was sampled meanwhile, with its timers (CPU mode).
    const timers = posixTimers()
    if (mode === 'cpu' && timers) c.ok(timers.length >= 3, `children (cpu mode): only ${timers.length} POSIX timers in the sampled parent`)
    s.stop()
    await Promise.all(workers.map((w) => w.terminate()))
    c.info.children[mode] = { forks: got.length, caught: got.reduce((a, r) => a + r.count, 0), childCpuMs: Math.round(got.reduce((a, r) => a + r.cpuMs, 0)), parentTimers: timers ? timers.length : null }
  }
  fs.rmSync(dir, { recursive: true, force: true })
})
