'use strict'
// Every format, written by `machsampler convert` from one recording of the
// demo, checked with a reader that is not ours: pprof-format for pprof,
// ajv with speedscope's published schema, Chrome's .cpuprofile structure,
// the Firefox Profiler's processed-format tables, a collapsed-stack parser,
// and headless Chromium for the flame graph. Then the JS API around files.

const fs = require('fs')
const path = require('path')
const os = require('os')
const zlib = require('zlib')
const util = require('util')
const Ajv = require('ajv')
const { Profile: PprofProfile } = require('pprof-format')
const ms = require('..')
const h = require('./fixtures/cli-helpers')

const SPEEDSCOPE_SCHEMA = require.resolve('speedscope/dist/release/file-format-schema.json')

let dir
let recorded // the .machprof the CLI wrote
let profile // it, loaded
let totalSamples
let runningSamples
let totalRows
let hottest // the function with the most self samples

beforeAll(() => {
  dir = h.tmpdir('formats')
  recorded = h.recordDemo(dir).file
  profile = ms.loadProfile(recorded)
  // Each row stands for `weight` samples.
  totalSamples = 0
  runningSamples = 0
  for (let i = 0; i < profile.samples.thread.length; i++) {
    totalSamples += profile.samples.weight[i]
    if (!profile.samples.idle[i]) runningSamples += profile.samples.weight[i]
  }
  totalRows = profile.samples.thread.length
  hottest = ms.profileReport(profile, { top: 1 }).functions[0].name
}, 120000)

afterAll(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true })
})

function convert(name, extra = []) {
  const out = path.join(dir, name)
  const r = h.cli(['convert', recorded, '-o', out, ...extra])
  expect(r.stderr).toContain(`wrote ${out}`)
  expect(r.status).toBe(0)
  return out
}

/** Function names as the formats show them (symbolicated by record). */
function names() {
  return profile.symbols.functions.name
}

test('the recording has symbols, JIT names included, and every kind of thread', () => {
  expect(profile.symbols).toBeDefined()
  const all = names().join('\n')
  for (const fn of ['fibonacciOnMainThread', 'primeSieveInWorker']) expect(all).toContain(fn)
  expect(profile.threads.filter((t) => t.isMain)).toHaveLength(1)
  expect(new Set(profile.samples.thread).size).toBeGreaterThanOrEqual(4)
  expect(runningSamples).toBeGreaterThan(50)
})

test('pprof decodes with pprof-format: types, counts, names, mappings, labels', () => {
  const file = convert('demo.pb.gz')
  const raw = fs.readFileSync(file)
  expect(raw[0]).toBe(0x1f) // gzipped
  const p = PprofProfile.decode(zlib.gunzipSync(raw))
  const str = (i) => p.stringTable.strings[Number(i)]
  // The demo is recorded in CPU mode: its samples are CPU time, and say so.
  expect(profile.meta.mode).toBe('cpu')
  expect(p.sampleType.map((t) => `${str(t.type)}/${str(t.unit)}`)).toEqual(['samples/count', 'cpu/nanoseconds'])
  expect(`${str(p.periodType.type)}/${str(p.periodType.unit)}`).toBe('cpu/nanoseconds')
  const count = p.sample.reduce((n, s) => n + Number(s.value[0]), 0)
  expect(count).toBe(totalSamples)
  const cpu = p.sample.reduce((n, s) => n + Number(s.value[1]), 0)
  expect(cpu).toBe(totalSamples * Number(profile.intervalNs))
  expect(Number(p.period)).toBe(Number(profile.intervalNs))
  const fnNames = p.function.map((f) => str(f.name)).join('\n')
  expect(fnNames).toContain('fibonacciOnMainThread')
  expect(fnNames).toContain(hottest)
  // Every location id a sample names exists, and has an address and a line.
  const locs = new Map(p.location.map((l) => [Number(l.id), l]))
  for (const s of p.sample) for (const id of s.locationId) expect(locs.has(Number(id))).toBe(true)
  expect(p.location.every((l) => BigInt(l.address) > 0n && l.line.length === 1)).toBe(true)
  // A mapping per module, with paths and (for the node binary) a build id.
  expect(p.mapping).toHaveLength(profile.modules.length)
  expect(p.mapping.some((m) => str(m.buildId) !== '')).toBe(true)
  // Labels: thread name, tid, state.
  const labels = p.sample[0].label.map((l) => str(l.key))
  expect(labels).toEqual(expect.arrayContaining(['thread', 'tid', 'state']))
  const tids = new Set(p.sample.map((s) => Number(s.label.find((l) => str(l.key) === 'tid').num)))
  expect(tids).toEqual(new Set(profile.samples.thread.map((t) => profile.threads[t].tid)))
})

test('speedscope validates against the schema speedscope publishes', () => {
  const file = convert('demo.speedscope.json')
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'))
  const schema = JSON.parse(fs.readFileSync(SPEEDSCOPE_SCHEMA, 'utf8'))
  const ajv = new Ajv({ allErrors: true, strict: false })
  const validate = ajv.compile(schema)
  expect(validate.errors).toBeNull()
  expect(validate(doc) ? null : validate.errors).toBeNull()
  // One sampled profile per sampled thread, sharing one frame table.
  expect(doc.profiles).toHaveLength(new Set(profile.samples.thread).size)
  expect(doc.profiles.every((p) => p.type === 'sampled' && p.samples.length === p.weights.length)).toBe(true)
  expect(doc.profiles.reduce((n, p) => n + p.samples.length, 0)).toBe(totalRows)
  // Weights are the samples' time: rows times their weight, in ns.
  const weightNs = doc.profiles.reduce((n, p) => n + p.weights.reduce((a, b) => a + b, 0), 0)
  expect(weightNs).toBe(totalSamples * Number(profile.intervalNs))
  const frames = doc.shared.frames.length
  expect(doc.profiles.every((p) => p.samples.every((s) => s.every((f) => f >= 0 && f < frames)))).toBe(true)
  expect(doc.shared.frames.map((f) => f.name).join('\n')).toContain('fibonacciOnMainThread')
  expect(doc.profiles[doc.activeProfileIndex].name).toContain(String(profile.threads.find((t) => t.isMain).tid))
})

test('Firefox Profiler processed format: one thread per sampled thread, consistent tables, CPU deltas', () => {
  const file = convert('demo.fxprof.json')
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'))
  expect(typeof doc.meta.version).toBe('number')
  expect(typeof doc.meta.preprocessedProfileVersion).toBe('number')
  expect(doc.meta.interval).toBeCloseTo(Number(profile.intervalNs) / 1e6)
  expect(doc.meta.categories.map((c) => c.name)).toEqual(expect.arrayContaining(['JavaScript', 'Native']))
  expect(doc.threads).toHaveLength(new Set(profile.samples.thread).size)
  expect(doc.threads.filter((t) => t.isMainThread)).toHaveLength(1)
  let samples = 0
  let cpu = 0
  let jsFuncs = 0
  for (const t of doc.threads) {
    const { samples: s, stackTable: st, frameTable: ft, funcTable: fn, stringArray } = t
    // Each thread opens with an empty sample of no weight (the Profiler
    // takes a thread's first CPU delta for nothing).
    expect(s.stack[0]).toBe(null)
    expect(s.weight[0]).toBe(0)
    samples += s.length - 1
    expect(s.stack).toHaveLength(s.length)
    expect(s.stack.every((i) => i === null || (i >= 0 && i < st.length))).toBe(true)
    for (let i = 0; i < st.length; i++) {
      expect(st.prefix[i] === null || st.prefix[i] < i).toBe(true)
      expect(st.frame[i]).toBeLessThan(ft.length)
    }
    expect(ft.func.every((f) => f < fn.length)).toBe(true)
    expect(fn.name.every((n) => n < stringArray.length)).toBe(true)
    jsFuncs += fn.isJS.filter(Boolean).length
    if (s.threadCPUDelta) cpu += s.threadCPUDelta.reduce((a, b) => a + (b || 0), 0)
  }
  expect(samples).toBe(totalRows)
  expect(cpu).toBeGreaterThan(0)
  expect(jsFuncs).toBeGreaterThan(0)
  const strings = doc.threads.flatMap((t) => t.stringArray).join('\n')
  expect(strings).toContain('primeSieveInWorker')
})

test('.cpuprofile has the structure Chrome DevTools loads, for the main thread', () => {
  const file = convert('demo.cpuprofile')
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'))
  const main = profile.threads.findIndex((t) => t.isMain)
  // One entry per interval: a row of weight n is n entries; in CPU mode,
  // time off the CPU between rows is an entry of (idle).
  const mainSamples = profile.samples.thread.reduce((n, t, i) => n + (t === main ? profile.samples.weight[i] : 0), 0)
  const idleNode = doc.nodes.find((n) => n.callFrame.functionName === '(idle)')
  const offCpu = idleNode ? doc.samples.filter((id) => id === idleNode.id).length : 0
  expect(profile.meta.mode).toBe('cpu')
  expect(doc.samples).toHaveLength(mainSamples + offCpu)
  expect(doc.timeDeltas).toHaveLength(doc.samples.length)
  expect(Number.isInteger(doc.startTime) && Number.isInteger(doc.endTime)).toBe(true)
  expect(doc.startTime).toBeLessThanOrEqual(doc.endTime)
  expect(doc.timeDeltas.every((d) => Number.isInteger(d) && d >= 0)).toBe(true)
  expect(doc.timeDeltas.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(doc.endTime - doc.startTime)
  const byId = new Map(doc.nodes.map((n) => [n.id, n]))
  expect(byId.size).toBe(doc.nodes.length)
  expect(doc.nodes[0].callFrame.functionName).toBe('(root)')
  const parents = new Map()
  for (const n of doc.nodes) {
    expect(Object.keys(n.callFrame).sort()).toEqual(['columnNumber', 'functionName', 'lineNumber', 'scriptId', 'url'])
    expect(typeof n.callFrame.scriptId).toBe('string')
    expect(Number.isInteger(n.hitCount)).toBe(true)
    for (const c of n.children || []) {
      expect(byId.has(c)).toBe(true)
      expect(parents.has(c)).toBe(false) // a tree: one parent each
      parents.set(c, n.id)
    }
  }
  expect(parents.size).toBe(doc.nodes.length - 1)
  expect(doc.samples.every((id) => byId.has(id))).toBe(true)
  expect(doc.nodes.reduce((n, x) => n + x.hitCount, 0)).toBe(doc.samples.length)
  for (const n of doc.nodes) expect(n.hitCount).toBe(doc.samples.filter((id) => id === n.id).length)
  const fib = doc.nodes.find((n) => n.callFrame.functionName.startsWith('fibonacciOnMainThread'))
  expect(fib).toBeDefined()
  expect(fib.callFrame.url).toMatch(/^file:\/\/.*demo\.js$/)
  expect(fib.callFrame.lineNumber).toBeGreaterThanOrEqual(0)
})

function parseCollapsed(text) {
  const lines = text.trimEnd().split('\n')
  return lines.map((line) => {
    const m = /^(.+) (\d+)$/.exec(line)
    expect(m).not.toBeNull()
    return { frames: m[1].split(';'), count: Number(m[2]) }
  })
}

test('collapsed stacks parse as root;...;leaf count, per thread, idle left out unless asked', () => {
  const rows = parseCollapsed(fs.readFileSync(convert('demo.collapsed'), 'utf8'))
  expect(rows.reduce((n, r) => n + r.count, 0)).toBe(runningSamples)
  // Each stack starts with its thread, "name (tid)".
  const tids = new Set(profile.threads.map((t) => String(t.tid)))
  expect(rows.every((r) => tids.has(/\((\d+)\)$/.exec(r.frames[0])[1]))).toBe(true)
  expect(rows.some((r) => r.frames[r.frames.length - 1].startsWith('fibonacciOnMainThread'))).toBe(true)

  const all = parseCollapsed(fs.readFileSync(convert('all.folded', ['--idle', '--no-thread-prefix']), 'utf8'))
  expect(all.reduce((n, r) => n + r.count, 0)).toBe(totalSamples)
  expect(all.some((r) => tids.has((/\((\d+)\)$/.exec(r.frames[0]) || [])[1]))).toBe(false)
})

describe('flame graph', () => {
  test('HTML opens in headless Chromium: not blank, hottest function in the DOM, search works offline', () => {
    const file = convert('demo.html')
    const html = fs.readFileSync(file, 'utf8')
    expect(html).not.toMatch(/(src|href)="https?:/) // self-contained
    const png = path.join(dir, 'demo.png')
    h.chromium(`file://${file}`, [`--screenshot=${png}`])
    const { ink, colours } = h.inkAndColours(h.readPng(png))
    expect(ink).toBeGreaterThan(0.05)
    expect(colours).toBeGreaterThan(20)

    const dom = h.chromium(`file://${file}`, ['--dump-dom'])
    const escaped = hottest.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
    expect(dom).toContain(escaped)
    // The inline script ran: frames are drawn as elements, one thread
    // picker entry per sampled thread plus "All threads".
    expect(dom).toMatch(/<div class="f k[jnut]/)
    expect(dom).toMatch(/<option value="-1">All threads/)
    // Search restores from the URL (?s= or #s=); "Matched:" appears once it ran.
    const searched = h.chromium(`file://${file}?s=fibonacciOnMainThread`, ['--virtual-time-budget=3000', '--dump-dom'])
    expect(searched).toMatch(/Matched: [\d.]+%/)
  }, 120000)

  test('SVG is the same graph as a bare, well-formed SVG', () => {
    const svg = fs.readFileSync(convert('demo.svg'), 'utf8')
    expect(svg.startsWith('<?xml')).toBe(true)
    expect(svg).toContain('<svg')
    expect(svg.trimEnd().endsWith('</svg>')).toBe(true)
    expect(svg).toContain('fibonacciOnMainThread')
  })
})

test('.machprof round-trips losslessly through convert', () => {
  const out = convert('again.machprof')
  const again = ms.loadProfile(out)
  const plain = (p) =>
    JSON.stringify(p, (k, v) => {
      if (typeof v === 'bigint') return `${v}n`
      if (ArrayBuffer.isView(v)) return Array.from(v, (x) => (typeof x === 'bigint' ? `${x}n` : x))
      return v
    })
  expect(plain(again)).toBe(plain(profile))
})

describe('JS API for files', () => {
  test('exportProfile returns a Buffer for every format; saveProfile picks by extension, atomically', () => {
    for (const f of ['machprof', 'pprof', 'speedscope', 'firefox', 'cpuprofile', 'collapsed', 'html', 'flamegraph', 'svg']) {
      const b = ms.exportProfile(profile, f)
      expect(Buffer.isBuffer(b)).toBe(true)
      expect(b.length).toBeGreaterThan(0)
    }
    const sub = path.join(dir, 'api')
    fs.mkdirSync(sub)
    expect(ms.saveProfile(profile, path.join(sub, 'a.cpuprofile'))).toBe('cpuprofile')
    expect(ms.saveProfile(profile, path.join(sub, 'b.txt'), 'collapsed')).toBe('collapsed')
    expect(ms.saveProfile(profile, path.join(sub, 'c.out'), { format: 'html', includeIdle: true })).toBe('html')
    expect(h.listDir(sub)).toEqual(['a.cpuprofile', 'b.txt', 'c.out'])
    expect(ms.formatFromPath('x.PB.GZ')).toBe('pprof')
    expect(ms.parseFormatName('FlameGraph')).toBe('html')
  })

  /** Asserts that `fn` throws a real Error with `code` and `part` in its message. */
  const expectCode = (fn, code, part = '') => {
    const thrown = (() => {
      try {
        fn()
      } catch (e) {
        return e
      }
      return null
    })()
    expect(thrown && util.types.isNativeError(thrown)).toBe(true)
    expect(thrown).toMatchObject({ code, message: expect.stringContaining(part) })
  }

  test('bad arguments and files are coded errors', () => {
    expectCode(() => ms.exportProfile(profile, 'gif'), 'EINVAL', 'formats are machprof')
    expectCode(() => ms.exportProfile(profile, 'html', { idle: true }), 'EINVAL', "unknown option 'idle'; valid options are includeIdle, threadPrefix, compress, view")
    expectCode(() => ms.exportProfile(profile, 'pprof', { format: 'html' }), 'EINVAL', 'options.format is for saveProfile(); exportProfile() takes the format as its second argument')
    expectCode(() => ms.exportProfile(profile, 'html', { includeIdle: 1 }), 'EINVAL', 'must be a boolean')
    expectCode(() => ms.exportProfile({}, 'html'), 'EINVAL')
    expectCode(() => ms.saveProfile(profile, path.join(dir, 'x.json')), 'EINVAL', 'cannot tell the format')
    expectCode(() => ms.saveProfile(profile, path.join(dir, 'missing', 'x.html')), 'ENOENT', 'cannot write')
    expectCode(() => ms.saveProfile(profile, dir, 'html'), 'EISDIR')
    expectCode(() => ms.saveProfile(profile, path.join(dir, 'c.speedscope.json'), { compress: true }), 'EINVAL', 'machprof format only; speedscope is never compressed')
    expectCode(() => ms.exportProfile(profile, 'pprof', { compress: false }), 'EINVAL', 'pprof is always gzip-compressed')
    expect(fs.existsSync(path.join(dir, 'c.speedscope.json'))).toBe(false)
    expectCode(() => ms.saveProfile(profile, path.join(dir, 'x'.repeat(300) + '.html')), 'ENAMETOOLONG', 'file name too long')
    expectCode(() => ms.saveProfile(profile, path.join(dir, 'a\0b.html')), 'EINVAL')
    expectCode(() => ms.loadProfile(path.join(dir, 'nope.machprof')), 'ENOENT', 'no such file')
    expectCode(() => ms.loadProfile(dir), 'EISDIR')
    const svg = path.join(dir, 'api.svg')
    ms.saveProfile(profile, svg)
    expectCode(() => ms.loadProfile(svg), 'EINVAL', 'not a machsampler profile')
    // Endless devices are refused from their first bytes, not read to the end.
    expectCode(() => ms.loadProfile('/dev/zero'), 'EINVAL', 'not a machsampler profile')
    expectCode(() => ms.loadProfile('/dev/urandom'), 'EINVAL', 'not a machsampler profile')
    expectCode(() => ms.loadProfile(recorded, 1), 'EINVAL', 'at most 1 argument')
    expectCode(() => ms.profileReport(profile, { by: 'wall' }), 'EINVAL', "'self' or 'total'")
    expectCode(() => ms.profileReport(profile, { top: 0 }), 'EINVAL', 'from 1 to 100000')
    expectCode(() => ms.profileReport(profile, { thread: 'no-such-thread' }), 'EINVAL', 'threads are')
    // Symbols but no roles (roles are then computed), and columns of
    // different lengths: an error, never an abort.
    const noRoles = { ...profile, threads: profile.threads.map(({ role, ...t }) => t) }
    const short = { ...noRoles, samples: { ...profile.samples, stack: profile.samples.stack.slice(0, 1) } }
    expectCode(() => ms.profileReport(short, { thread: 'main' }), 'EINVAL', 'inconsistent')
    expect(ms.profileReport(noRoles, { thread: 'main', top: 1 }).threads.length).toBeGreaterThan(0)
  })

  test('a version 1 file (before sample weights) loads, every row one sample', () => {
    const old = ms.loadProfile(path.join(__dirname, 'fixtures', 'format-v1.machprof'))
    expect(old.samples.thread.length).toBeGreaterThan(10)
    expect(Array.from(old.samples.weight).every((w) => w === 1)).toBe(true)
    expect(old.samples.weight).toHaveLength(old.samples.thread.length)
    expect(old.symbols.functions.name.length).toBeGreaterThan(0)
    // And it converts like any other.
    const out = path.join(dir, 'from-v1.collapsed')
    ms.saveProfile(old, out)
    const count = fs.readFileSync(out, 'utf8').trim().split('\n').reduce((n, l) => n + Number(l.split(' ').pop()), 0)
    expect(count).toBe(old.samples.idle.reduce((n, v) => n + (v ? 0 : 1), 0))
  })

  test('truncated, corrupt and future-version files are rejected, never crash', () => {
    const bytes = fs.readFileSync(recorded)
    const bad = path.join(dir, 'bad.machprof')
    for (const n of [0, 5, 27, 28, 100, Math.floor(bytes.length / 2), bytes.length - 1]) {
      fs.writeFileSync(bad, bytes.subarray(0, n))
      expectCode(() => ms.loadProfile(bad), 'EINVAL', 'cannot load')
    }
    const future = Buffer.from(bytes)
    future.writeUInt32LE(3, 8)
    fs.writeFileSync(bad, future)
    expectCode(() => ms.loadProfile(bad), 'EINVAL', 'format version 3 is newer')
    // A wrong checksum is caught whatever the payload.
    const flipped = Buffer.from(bytes)
    flipped[24] ^= 0xff
    fs.writeFileSync(bad, flipped)
    expectCode(() => ms.loadProfile(bad), 'EINVAL', 'checksum mismatch')
    // A flip inside the compressed data is rejected, unless it lands on
    // bits the decompressor never reads (unused code lengths, padding):
    // then the same profile loads.
    const inData = Buffer.from(bytes)
    inData[inData.length - 20] ^= 0xff
    fs.writeFileSync(bad, inData)
    let loaded = null
    try {
      loaded = ms.loadProfile(bad)
    } catch (e) {
      expect(util.types.isNativeError(e) && e.code === 'EINVAL').toBe(true)
    }
    if (loaded) expect(Buffer.from(ms.exportProfile(loaded, 'machprof'))).toEqual(Buffer.from(ms.exportProfile(ms.loadProfile(recorded), 'machprof')))
  })

  test('profileReport: self and total, threads by name or tid, idle on request', () => {
    const main = profile.threads.find((t) => t.isMain)
    const r = ms.profileReport(profile, { thread: main.tid, by: 'total', top: 5 })
    expect(r.threads).toHaveLength(profile.threads.filter((t) => t.tid === main.tid).length)
    expect(r.functions).toHaveLength(5)
    for (let i = 1; i < r.functions.length; i++) {
      expect(r.functions[i - 1].totalSamples).toBeGreaterThanOrEqual(r.functions[i].totalSamples)
    }
    expect(r.functions.every((f) => f.selfSamples <= f.totalSamples && f.totalSamples <= r.samples)).toBe(true)
    const withIdle = ms.profileReport(profile, { includeIdle: true })
    expect(withIdle.samples).toBe(totalSamples)
    expect(withIdle.idleLeftOut).toBe(0)
    const all = ms.profileReport(profile)
    expect(all.samples + all.idleLeftOut).toBe(totalSamples)
    expect(all.paths[0].frames.length).toBeGreaterThan(0)
  })
})

test('an in-process profile has thread roles once symbolicated: report --thread main / worker works', async () => {
  const { Worker } = require('worker_threads')
  ms.start({ intervalMs: 1 })
  const w = new Worker('const end = Date.now() + 300; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)', { eval: true })
  const end = Date.now() + 300
  let x = 0
  while (Date.now() < end) x += Math.sqrt(x + 1)
  await new Promise((r) => w.once('exit', r))
  const p = ms.stop({ symbolicate: true })
  const main = p.threads.find((t) => t.isMain)
  expect(main.role).toBe('main')
  expect(p.threads.some((t) => /^worker/.test(t.role))).toBe(true)
  for (const which of ['main', 'worker']) {
    const r = ms.profileReport(p, { thread: which, top: 1 })
    expect(r.threads.length).toBeGreaterThan(0)
    expect(r.threads.every((t) => t.role.startsWith(which))).toBe(true)
  }
}, 60000)

describe('withProfiler and profile()', () => {
  function spin(msec) {
    const end = Date.now() + msec
    let x = 0
    while (Date.now() < end) x += Math.sqrt(x + 1)
    return x
  }

  test('sync: result and a symbolicated profile; the sampler is stopped', () => {
    const { result, profile: p } = ms.withProfiler(() => spin(100) && 42, { intervalMs: 1 })
    expect(result).toBe(42)
    expect(p.samples.thread.length).toBeGreaterThan(0)
    expect(p.symbols).toBeDefined()
    expect(ms.isRunning()).toBe(false)
  })

  test('async: waits for the promise, saves to output', async () => {
    const out = path.join(dir, 'sugar.speedscope.json')
    const r = await ms.withProfiler(
      async () => {
        await new Promise((res) => setTimeout(res, 30))
        return 'done'
      },
      { output: out, symbolicate: false },
    )
    expect(r.result).toBe('done')
    expect(r.profile.symbols).toBeUndefined()
    expect(fs.existsSync(out)).toBe(true)
    expect(ms.isRunning()).toBe(false)
  })

  test('errors are rethrown unchanged and the sampler stopped', async () => {
    const boom = new Error('boom')
    expect(() =>
      ms.withProfiler(() => {
        throw boom
      }),
    ).toThrow(boom)
    expect(ms.isRunning()).toBe(false)
    await expect(ms.withProfiler(() => Promise.reject(boom))).rejects.toBe(boom)
    expect(ms.isRunning()).toBe(false)
  })

  test('an output that cannot be written is refused before fn runs', () => {
    let ran = false
    const missing = path.join(os.tmpdir(), `machsampler-missing-${process.pid}`, 'p.html')
    let err
    try {
      ms.withProfiler(() => (ran = true), { output: missing })
    } catch (e) {
      err = e
    }
    expect([err && err.code, ran, ms.isRunning()]).toEqual(['ENOENT', false, false])
    expect(err.message).toMatch(/no such directory/)
  })

  test('profile() wraps a function and delivers each call profile', async () => {
    const got = []
    const hot = ms.profile(function hotFunction(n) {
      return spin(n) > 0 ? n : 0
    }, { onProfile: (p) => got.push(p), symbolicate: false, intervalMs: 1 })
    expect(hot.name).toBe('hotFunction')
    expect(hot(20)).toBe(20)
    const later = ms.profile(async (v) => v * 2, { onProfile: (p) => got.push(p) })
    expect(await later(4)).toBe(8)
    expect(got).toHaveLength(2)
  })

  test('an overlapping call of an async profiled function rejects with EAGAIN, a sync one throws', async () => {
    let release
    const slow = ms.profile(async () => new Promise((r) => (release = r)), { symbolicate: false })
    const first = slow()
    const second = slow()
    expect(second).toBeInstanceOf(Promise)
    await expect(second).rejects.toMatchObject({ code: 'EAGAIN' })
    const sync = ms.profile(() => 1, { symbolicate: false })
    expect(() => sync()).toThrow(expect.objectContaining({ code: 'EAGAIN' }))
    release(7)
    expect(await first).toBe(7)
    expect(ms.isRunning()).toBe(false)
  })

  test('bad options are EINVAL and name the valid keys', () => {
    expect(() => ms.withProfiler(() => 1, { intervalMS: 1 })).toThrow(/valid options are .*output/)
    expect(() => ms.withProfiler('nope')).toThrow(/fn must be a function/)
    expect(() => ms.profile(() => 1, { onProfile: 5 })).toThrow(/onProfile must be a function/)
    expect(() => ms.withProfiler(() => 1, { format: 'gif' })).toThrow(/formats are/)
    // profile() checks start()'s options when it wraps, not at each call.
    const einval = (re) => expect.objectContaining({ code: 'EINVAL', message: expect.stringMatching(re) })
    expect(() => ms.profile(() => 1, { bogus: 5 })).toThrow(einval(/unknown option 'bogus'; valid options are intervalMs.*onProfile/))
    expect(() => ms.profile(() => 1, { intervalMs: 0 })).toThrow(einval(/intervalMs must be an integer from 1 to 1000, got 0/))
    expect(() => ms.profile(async () => 1, { mode: 'x' })).toThrow(einval(/mode must be 'cpu' or 'wall'/))
    expect(() => ms.withProfiler(() => 1, { bogus: 5 })).toThrow(einval(/valid options are .*format$/))
    expect(ms.isRunning()).toBe(false)
  })
})
