'use strict'
// Bad input to every JS entry point, while the sampler runs at 1 kHz in
// the background. The rule: a call either works or throws an Error with a
// string `code` (EINVAL, ENOENT, ...). Never a crash, never an uncoded
// TypeError, never a changed sampler state, never a file left behind.
//
// A. Every export of index.js (and the binding's checkStartOptions) with
//    each value of a zoo (wrong types, out-of-range and huge numbers,
//    undefined/null, BigInts, symbols, proxies that throw, getters that
//    throw, huge strings) as each argument, and with extra arguments.
//    Bad modes (wrong case, padding, NUL, other types) to start() and
//    checkStartOptions(), with and without a session running: EINVAL
//    naming both valid modes, before anything else is judged.
// B. Thousands of mutated profiles (a real one with one or more fields
//    replaced by zoo values, truncated or swapped columns, indices out of
//    range, cycles in the stack tree, mismatched symbol tables, weights of
//    0 or 2^32-1, a weight column missing, short or of the wrong type)
//    through symbolicate, exportProfile (every format), profileReport and
//    saveProfile.
// The background session alternates CPU and wall mode: it starts in CPU
// mode, and each restart (a zoo stop() that ended it, the pause for the
// bad modes with no session) takes the other mode.
// C. In grandchildren with a time limit each, inputs that could overflow
//    a stack or block: a 200,000-deep stack chain through every exporter
//    and the report, and module paths that are a FIFO, /dev/zero, a
//    directory or /proc files through symbolicate.

const fs = require('fs')
const path = require('path')
const { execFileSync } = require('child_process')
const { main, progress } = require('../lib/child')
const { Sampling, ms } = require('../lib/sampler')
const { rng, spin, weightSum } = require('../lib/check')
const { runNode, describe, tmpdir, ADDON, ROOT } = require('../lib/proc')

const FORMATS = ['machprof', 'pprof', 'speedscope', 'firefox', 'cpuprofile', 'collapsed', 'html', 'svg']

/** What the zoo's proxies and getters throw: the caller's own exception. */
class ZooError extends Error {}

function zoo() {
  const throwingProxy = new Proxy(
    {},
    {
      get() {
        throw new ZooError('proxy get')
      },
      ownKeys() {
        throw new ZooError('proxy ownKeys')
      },
      getOwnPropertyDescriptor() {
        throw new ZooError('proxy descriptor')
      },
      has() {
        throw new ZooError('proxy has')
      },
    },
  )
  const throwingGetter = Object.defineProperty({}, 'intervalMs', {
    enumerable: true,
    get() {
      throw new ZooError('getter')
    },
  })
  return [
    ['undefined', undefined],
    ['null', null],
    ['true', true],
    ['false', false],
    ['0', 0],
    ['-0', -0],
    ['1', 1],
    ['-1', -1],
    ['0.5', 0.5],
    ['NaN', NaN],
    ['Infinity', Infinity],
    ['-Infinity', -Infinity],
    ['2^31', 2 ** 31],
    ['2^32', 2 ** 32],
    ['2^53', 2 ** 53],
    ['2^64', 2 ** 64],
    ['1e308', 1e308],
    ['MIN_VALUE', Number.MIN_VALUE],
    ["''", ''],
    ["'x'", 'x'],
    ['1 MB string', 'x'.repeat(1 << 20)],
    ['NUL string', 'a\0b'],
    ['unicode string', 'машина/профиль.html'],
    ['lone surrogate', '\ud800.html'],
    ['symbol', Symbol('s')],
    ['10n', 10n],
    ['-1n', -1n],
    ['2n^70', 2n ** 70n],
    ['{}', {}],
    ['[]', []],
    ['[1]', [1]],
    ['function', () => 1],
    ['Date', new Date()],
    ['RegExp', /x/],
    ['Map', new Map()],
    ['Uint8Array', new Uint8Array(4)],
    ['Buffer', Buffer.alloc(4)],
    ['throwing proxy', throwingProxy],
    ['throwing getter', throwingGetter],
    ['null prototype', Object.create(null)],
    ['frozen', Object.freeze({ intervalMs: 5 })],
    ['Error', new Error('x')],
    ['Promise', Promise.resolve(1)],
    ['options {intervalMs: 1e9}', { intervalMs: 1e9 }],
    ['options {format: "gif"}', { format: 'gif' }],
    ['options with symbol key', { [Symbol('k')]: 1 }],
    ['options {__proto__}', JSON.parse('{"__proto__": {"intervalMs": 0}}')],
    ['options {mode: "CPU"}', { mode: 'CPU' }],
    ['options {mode: 7}', { mode: 7 }],
    ['options {mode: "wall", intervalMs: 0}', { mode: 'wall', intervalMs: 0 }],
  ]
}

/**
 * Calls fn(...args): 'ok', 'coded:<code>', 'propagated' (the exception a
 * proxy trap or getter of the argument threw, passed on unchanged, as
 * JSON.stringify does), or a wrong-result message.
 */
function attempt(fn, args) {
  try {
    const r = fn(...args)
    if (r && typeof r.then === 'function') r.catch(() => {}) // withProfiler(async): not awaited here
    return 'ok'
  } catch (e) {
    if (e instanceof ZooError) return 'propagated'
    if (e instanceof Error && typeof e.code === 'string' && e.code.length > 0) return `coded:${e.code}`
    return `UNCODED ${e && e.constructor && e.constructor.name}: ${String(e && e.message).slice(0, 200)}`
  }
}

function recordProfile() {
  ms.start({ intervalMs: 1 })
  spin(300)
  const p = ms.stop()
  p.symbols = ms.symbolicate(p)
  return p
}

/** A deep copy of a profile (typed arrays copied). */
function clone(p) {
  const c = (v) => {
    if (ArrayBuffer.isView(v)) return v.slice()
    if (Array.isArray(v)) return v.map(c)
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, c(x)]))
    return v
  }
  return c(p)
}

/** Paths of every field of a profile, e.g. ['samples', 'thread']. */
function fieldPaths(p, prefix = [], out = []) {
  for (const [k, v] of Object.entries(p)) {
    const here = [...prefix, k]
    out.push(here)
    if (v && typeof v === 'object' && !ArrayBuffer.isView(v) && !(Array.isArray(v) && v.length > 8)) fieldPaths(v, here, out)
    else if (Array.isArray(v) && v.length > 0) fieldPaths({ 0: v[0] }, here, out)
  }
  return out
}

function setPath(obj, p, value) {
  try {
    let o = obj
    for (let i = 0; i < p.length - 1; i++) {
      if (o === null || typeof o !== 'object') return
      o = o[p[i]]
    }
    if (o !== null && typeof o === 'object') o[p[p.length - 1]] = value
  } catch (e) {
    if (!(e instanceof ZooError)) throw e // an earlier mutation put a proxy on the path
  }
}

/** Structural mutations that keep types right but break invariants. */
function structural(p, random) {
  const pick = (n) => Math.floor(random() * n)
  const muts = [
    () => { p.samples.thread = p.samples.thread.slice(0, pick(p.samples.thread.length)) },
    () => { if (p.samples.stack.length) p.samples.stack[pick(p.samples.stack.length)] = 0xffffffff },
    () => { if (p.samples.thread.length) p.samples.thread[pick(p.samples.thread.length)] = p.threads.length + pick(5) },
    () => { if (p.stacks.parent.length) { const i = pick(p.stacks.parent.length); p.stacks.parent[i] = i } }, // self loop
    () => { if (p.stacks.parent.length > 1) { const i = pick(p.stacks.parent.length - 1); p.stacks.parent[i] = i + 1 } }, // forward edge: a cycle
    () => { if (p.stacks.parent.length) p.stacks.parent[pick(p.stacks.parent.length)] = -2 - pick(1000) },
    () => { if (p.stacks.frame.length) p.stacks.frame[pick(p.stacks.frame.length)] = p.frames.address.length + pick(3) },
    () => { p.frames.address = new BigUint64Array(0) },
    () => { p.stacks.parent = p.stacks.parent.slice(1) },
    () => { p.samples.timeNs = new BigUint64Array(p.samples.timeNs.length).fill(0xffffffffffffffffn) },
    () => { p.startTimeNs = 2n ** 64n - 1n; p.endTimeNs = 0n },
    () => { p.intervalNs = 0n },
    () => { p.samples.idle = new Uint8Array(p.samples.idle.length).fill(255) },
    () => { p.threads = [] },
    () => { p.threads.push({ tid: -1, name: '\0'.repeat(10), isMain: 'yes' }) },
    () => { p.modules = [{ path: '/nonexistent/lib.so', start: 0n, end: 2n ** 64n - 1n, bias: 2n ** 63n, buildId: 'zz' }] },
    () => { if (p.modules.length) { p.modules[0].start = p.modules[0].end + 1n } },
    () => { if (p.symbols) p.symbols.frameFunction = p.symbols.frameFunction.slice(1) },
    () => { if (p.symbols && p.symbols.frameFunction.length) p.symbols.frameFunction[0] = 0xfffffff0 },
    () => { if (p.symbols) p.symbols.functions.name = [] },
    () => { if (p.symbols) p.symbols.functions.module = p.symbols.functions.module.map(() => 1e6) },
    () => { if (p.symbols) p.symbols.functions.kind = p.symbols.functions.kind.map(() => 'bogus') },
    () => { p.samples.thread = new Int32Array(p.samples.thread.length) }, // the wrong typed array
    () => { p.samples.timeNs = Array.from(p.samples.timeNs) }, // a plain array
    () => { if (p.samples.weight.length) p.samples.weight[pick(p.samples.weight.length)] = 0 },
    () => { p.samples.weight = new Uint32Array(p.samples.weight.length).fill(0xffffffff) }, // sums past 2^32
    () => { p.samples.weight = p.samples.weight.slice(0, pick(p.samples.weight.length)) },
    () => { p.samples.weight = new Float64Array(p.samples.weight) },
    () => { delete p.samples.weight },
    () => { p.samples.cpuDeltaNs = new BigUint64Array(p.samples.cpuDeltaNs.length).fill(2n ** 64n - 1n) },
    () => { p.stacks.parent = new Uint32Array(p.stacks.parent) },
    () => { p.version = 2 },
    () => { p.meta.platform = 'plan9' },
    () => { p.stats = null },
  ]
  try {
    muts[pick(muts.length)]()
  } catch {
    // An earlier mutation replaced the field this one edits: nothing to do.
  }
}

const DEEP_PROGRAM = (depth, what) => `
const ms = require(${JSON.stringify(ADDON)})
ms.start({ intervalMs: 1 })
const p0 = ms.stop()
// One thread, one sample at the bottom of a ${depth}-frame chain.
const n = ${depth}
const p = {
  ...p0,
  threads: [{ tid: 1, name: 'deep', isMain: true }],
  samples: { thread: new Uint32Array([0, 0]), timeNs: new BigUint64Array([p0.startTimeNs, p0.startTimeNs]), stack: new Uint32Array([n - 1, n - 1]), idle: new Uint8Array(2), cpuDeltaNs: new BigUint64Array(2), weight: new Uint32Array([1, 3]) },
  stacks: { frame: new Uint32Array(n).map((_, i) => i % 1000), parent: new Int32Array(n).map((_, i) => i - 1) },
  frames: { address: new BigUint64Array(1000).map((_, i) => 0x400000n + BigInt(i) * 16n) },
  stats: { ...p0.stats, samplesCaptured: 4, threadsSampled: 2 },
}
const out = {}
const what = ${JSON.stringify(what)}
try {
  if (what === 'report') out.r = ms.profileReport(p, {}).functions.length
  else if (what === 'symbolicate') out.r = ms.symbolicate(p).functions.name.length
  else out.r = ms.exportProfile(p, what).length
} catch (e) { out.code = e.code || ('UNCODED ' + e.message) }
console.log(JSON.stringify(out))
`

const MODULE_PATH_PROGRAM = (modPath) => `
const ms = require(${JSON.stringify(ADDON)})
ms.start({ intervalMs: 1 })
const e = Date.now() + 100; while (Date.now() < e);
const p = ms.stop()
p.modules = p.modules.map((m, i) => (i === 0 ? { ...m, path: ${JSON.stringify(modPath)}, buildId: '' } : m))
const out = {}
try { out.r = ms.symbolicate(p).functions.name.length } catch (e) { out.code = e.code || ('UNCODED ' + e.message) }
console.log(JSON.stringify(out))
`

main(async (o, c) => {
  const random = rng(o.seed ?? 3)
  const dir = tmpdir('badjs')
  // Relative paths from the zoo land here, not in the repository.
  const cwd = fs.mkdtempSync(path.join(dir, 'cwd-'))
  process.chdir(cwd)
  const base = recordProfile()
  c.samples += weightSum(base)
  const binding = require('../../binding.js')

  // The sampler runs while all of this happens, as in real use.
  const sampling = new Sampling(c, { intervalMs: 1, mode: 'alternate', what: 'bad-input background' })
  const outcomes = {}
  const tally = (fn, res) => {
    const k = `${fn}:${res.startsWith('coded:') || res === 'ok' || res === 'propagated' ? res : 'UNCODED'}`
    outcomes[k] = (outcomes[k] || 0) + 1
  }

  // A. Every entry point x every zoo value x every argument position.
  const Z = zoo()
  const valid = {
    profile: base,
    path: path.join(dir, 'ok.machprof'),
    format: 'pprof',
  }
  const entries = {
    start: [[{}]],
    stop: [[{}]],
    stats: [[]],
    isRunning: [[]],
    threadCount: [[]],
    setNativeUnwinding: [[true]],
    getNativeUnwinding: [[]],
    symbolicate: [[valid.profile]],
    exportProfile: [[valid.profile, valid.format, {}]],
    saveProfile: [[valid.profile, valid.path, {}]],
    loadProfile: [[valid.path]],
    formatFromPath: [['x.html']],
    parseFormatName: [['svg']],
    profileReport: [[valid.profile, {}]],
    withProfiler: [[() => 1, {}]],
    profile: [[() => 1, {}]],
  }
  ms.saveProfile(base, valid.path)
  let calls = 0
  for (const [name, [args]] of Object.entries(entries)) {
    const fn = name === 'checkStartOptions' ? binding.checkStartOptions : ms[name]
    const positions = Math.max(args.length, 1)
    for (let pos = 0; pos < positions; pos++) {
      for (const [label, value] of Z) {
        const a = args.slice()
        a[pos] = value
        // start/withProfiler with a valid value would start a second
        // session: EAGAIN while the background session runs is right.
        const res = attempt(fn, a.slice(0, pos + 1))
        tally(name, res)
        c.ok(!res.startsWith('UNCODED'), `${name}(arg ${pos} = ${label}): ${res}`)
        calls++
        // stop() with valid options (undefined, {}) does stop: only a
        // call that succeeded may have ended the background session.
        if (!ms.isRunning()) {
          c.ok(res === 'ok', `${name}(arg ${pos} = ${label}) ended the background session and returned ${res}`)
          sampling.begin()
        }
      }
    }
    // Extra arguments.
    const res = attempt(fn, [...args, 1, 2, 3])
    tally(name, res)
    c.ok(res === 'coded:EINVAL', `${name} with 3 extra arguments: ${res}`)
    calls++
    progress(`A: ${name}`)
  }
  for (const [label, value] of Z) {
    for (const args of [[value], [undefined, value], [value, value]]) {
      const res = attempt(binding.checkStartOptions, args)
      tally('checkStartOptions', res)
      c.ok(!res.startsWith('UNCODED'), `checkStartOptions(${label}): ${res}`)
      calls++
    }
  }
  // Bad modes: EINVAL naming the valid ones, whether or not a session
  // runs (a running one would otherwise answer EAGAIN).
  const BAD_MODES = [['CPU', 'CPU'], ['empty', ''], ['padded', 'wall '], ['NUL', 'cpu\0'], ['process', 'process'], ['number', 1], ['null', null], ['object', {}], ['array', ['cpu']], ['boolean', true]]
  const modeCheck = (during) => {
    for (const [label, mode] of BAD_MODES) {
      for (const [fn, f] of [['start', ms.start], ['checkStartOptions', binding.checkStartOptions]]) {
        let got
        try {
          f({ intervalMs: 1, mode })
          got = 'accepted'
        } catch (e) {
          got = e.code === 'EINVAL' && /'cpu'/.test(e.message) && /'wall'/.test(e.message) ? 'ok' : `${e.code}: ${e.message}`
        }
        if (got === 'accepted' && fn === 'start') ms.stop()
        c.eq(got, 'ok', `${fn}({ mode: ${label} }) ${during}`)
        calls++
      }
    }
  }
  modeCheck('while a session runs')
  // The background session survived all of it (bad start/stop changed nothing).
  c.ok(ms.isRunning(), 'the background session was stopped by a bad call')
  sampling.stop()
  modeCheck('with no session')
  c.ok(!ms.isRunning(), 'a bad mode started a session')
  c.info.entryPointCalls = calls
  sampling.begin()

  // B. Mutated profiles.
  const paths = fieldPaths(base)
  const mutations = o.mutations ?? 1000
  let mcalls = 0
  const saveDir = fs.mkdtempSync(path.join(dir, 'save-'))
  for (let i = 0; i < mutations; i++) {
    const p = clone(base)
    const k = 1 + Math.floor(random() * 3)
    const applied = []
    for (let j = 0; j < k; j++) {
      if (random() < 0.5) {
        const fp = paths[Math.floor(random() * paths.length)]
        const [label, value] = Z[Math.floor(random() * Z.length)]
        setPath(p, fp, value)
        applied.push(`${fp.join('.')}=${label}`)
      } else {
        structural(p, random)
        applied.push('structural')
      }
    }
    const target = ['symbolicate', 'export', 'report', 'save'][i % 4]
    let res
    if (target === 'symbolicate') res = attempt(ms.symbolicate, [p])
    else if (target === 'export') res = attempt(ms.exportProfile, [p, FORMATS[i % FORMATS.length]])
    else if (target === 'report') res = attempt(ms.profileReport, [p, { top: 5 }])
    else {
      res = attempt(ms.saveProfile, [p, path.join(saveDir, `m${i}.${['machprof', 'pb.gz', 'html', 'collapsed'][i % 4]}`)])
      // A failed save leaves nothing; a good one leaves exactly its file.
      const files = fs.readdirSync(saveDir)
      c.ok(res === 'ok' ? files.length === 1 : files.length === 0, `save of mutated profile #${i}: ${res}, files ${files.join(',')}`)
      for (const f of files) fs.unlinkSync(path.join(saveDir, f))
    }
    tally(target, res)
    c.ok(!res.startsWith('UNCODED'), `${target} of a profile with ${applied.join(', ')}: ${res}`)
    mcalls++
    if (i % 50 === 0) progress(`B: mutation ${i}`)
  }
  c.info.mutatedProfileCalls = mcalls
  sampling.stop()
  c.info.background = sampling.describe()
  const bySessionMode = c.info.background.sessions
  c.ok(bySessionMode.cpu >= 1 && bySessionMode.wall >= 1, `the background sessions ran in both modes: ${JSON.stringify(bySessionMode)}`)

  // C. Deep chains and odd module paths, each in a grandchild.
  const depth = 200000
  c.info.deep = {}
  for (const what of [...FORMATS, 'report', 'symbolicate']) {
    const r = await runNode(DEEP_PROGRAM(depth, what), { timeoutMs: 60000, node: o.node })
    let out = null
    try {
      out = JSON.parse(r.stdout.trim().split('\n').pop())
    } catch {}
    const ok = r.code === 0 && out && !String(out.code || '').startsWith('UNCODED')
    c.ok(ok, `a ${depth}-deep stack through ${what}: ${describe(r)} ${JSON.stringify(out)}`)
    c.info.deep[what] = r.timedOut ? 'hang' : r.signal ? r.signal : out ? (out.code ? out.code : 'ok') : `exit ${r.code}`
    if (r.timedOut) c.hang(`a ${depth}-deep stack through ${what} hung`)
  }
  const fifo = path.join(dir, 'fifo')
  execFileSync('mkfifo', [fifo])
  c.info.modulePaths = {}
  for (const p of [fifo, '/dev/zero', '/dev/null', dir, '/proc/self/mem', '/proc/self/maps', path.join(ROOT, 'package.json'), '']) {
    const r = await runNode(MODULE_PATH_PROGRAM(p), { timeoutMs: 20000, node: o.node })
    let out = null
    try {
      out = JSON.parse(r.stdout.trim().split('\n').pop())
    } catch {}
    const ok = r.code === 0 && out && !String(out.code || '').startsWith('UNCODED')
    const msg = `symbolicate with a module at ${p || "''"}: ${describe(r)} ${JSON.stringify(out)}`
    if (r.timedOut) c.hang(msg)
    else c.ok(ok, msg)
    c.info.modulePaths[p.replace(dir, '<tmp>') || "''"] = r.timedOut ? 'hang' : out ? (out.code ? out.code : 'ok') : `exit ${r.code} ${r.signal}`
  }
  c.info.outcomes = outcomes
  c.info.filesWrittenByZooPaths = fs.readdirSync(cwd)
  fs.rmSync(dir, { recursive: true, force: true })
})
