'use strict'
// The JS API in this process: argument checking, errors, stats while
// running, and the shape of a profile.
const os = require('os')
const path = require('path')
const util = require('util')
const { Worker } = require('worker_threads')
const ms = require('..')

afterEach(() => {
  if (ms.isRunning()) ms.stop()
})

function expectCode(fn, code, messagePart) {
  let err
  try {
    fn()
  } catch (e) {
    err = e
  }
  expect(err).toBeDefined()
  expect(util.types.isNativeError(err)).toBe(true)
  expect(err.code).toBe(code)
  if (messagePart) expect(err.message).toContain(messagePart)
  expect(ms.isRunning()).toBe(false)
}

describe('bad input is a coded error, never a crash or a clamp', () => {
  test.each([0, 0.5, 2000, NaN, Infinity, -1, 1001, 1e300])('intervalMs %p', (v) => {
    expectCode(() => ms.start({ intervalMs: v }), 'EINVAL', 'from 1 to 1000')
  })
  test.each(['10', true, null, {}, [], 10n])('intervalMs of the wrong type %p', (v) => {
    expectCode(() => ms.start({ intervalMs: v }), 'EINVAL', 'intervalMs must be a number, an integer from 1 to 1000, got')
  })
  test.each([0, -5, 1025, 3.5, NaN])('maxStackDepth %p', (v) => {
    expectCode(() => ms.start({ maxStackDepth: v }), 'EINVAL', 'from 1 to 1024')
  })
  test.each([0, -1, 0.5, 1e9])('bufferSamples %p', (v) => {
    expectCode(() => ms.start({ bufferSamples: v }), 'EINVAL', 'bufferSamples must be an integer from 1 to 100000000')
  })
  test('nativeUnwinding must be a boolean', () => {
    expectCode(() => ms.start({ nativeUnwinding: 1 }), 'EINVAL', 'boolean')
    expectCode(() => ms.setNativeUnwinding('yes'), 'EINVAL', 'boolean')
    expectCode(() => ms.setNativeUnwinding(), 'EINVAL', 'boolean')
  })
  test('unknown keys (typos) are rejected and the valid ones named', () => {
    expectCode(() => ms.start({ intervalMS: 10 }), 'EINVAL', "unknown option 'intervalMS'")
    expectCode(() => ms.start({ interval: 10 }), 'EINVAL', 'valid options are intervalMs')
  })
  test.each([null, 5, 'fast', [], () => {}])('options that are not an object: %p', (v) => {
    expectCode(() => ms.start(v), 'EINVAL', 'options must be')
  })
  test('extra arguments', () => {
    expectCode(() => ms.start({}, 1), 'EINVAL', 'start() takes at most 1 argument, got 2')
    expectCode(() => ms.stats(1), 'EINVAL', 'stats() takes no arguments')
  })
  test('EAGAIN when already running, ESRCH when not', () => {
    expectCode(() => ms.stop(), 'ESRCH', 'not running')
    ms.start()
    let err
    try {
      ms.start()
    } catch (e) {
      err = e
    }
    expect(err.code).toBe('EAGAIN')
    expect(ms.isRunning()).toBe(true)
    ms.stop()
    expectCode(() => ms.stop(), 'ESRCH')
  })
  test("the preload's exit save: a checkpoint period out of range, or without a checkpoint, is refused before arming", () => {
    const { exitSave } = require('../lib/addon.js')
    const base = { signals: ['SIGINT'], output: path.join(os.tmpdir(), 'never-written.machprof'), format: 'machprof' }
    for (const every of [0, 99, 86400001, NaN]) {
      expectCode(() => exitSave.arm({ ...base, checkpoint: `${base.output}.partial`, checkpointEveryMs: every }), 'EINVAL', 'checkpointEveryMs must be from 100 to 86400000')
    }
    expectCode(() => exitSave.arm({ ...base, checkpointEveryMs: 1000 }), 'EINVAL', 'checkpointEveryMs needs options.checkpoint')
  })
  test('explicit undefined means the default', () => {
    ms.start({ intervalMs: undefined, maxStackDepth: undefined })
    expect(ms.isRunning()).toBe(true)
    ms.stop()
  })
})

describe('stats and profile shape', () => {
  test('stats can be read while running, from any thread, and add up', async () => {
    ms.start({ intervalMs: 1 })
    const end = Date.now() + 300
    let x = 0
    while (Date.now() < end) x += Math.sqrt(x)
    const live = ms.stats()
    expect(live.threadsSampled).toBe(live.samplesCaptured + live.samplesDropped)
    // CPU mode: the sampler wakes to drain captures, every 40 ms at 1 kHz.
    expect(live.ticks).toBeGreaterThan(3)
    expect(live.samplesCaptured).toBeGreaterThan(0)
    expect(ms.threadCount()).toBeGreaterThan(1)
    // From a worker that loads the addon itself.
    const fromWorker = await new Promise((resolve, reject) => {
      const w = new Worker(`const m = require(${JSON.stringify(require.resolve('..'))}); require('worker_threads').parentPort.postMessage({ running: m.isRunning(), ticks: m.stats().ticks })`, { eval: true })
      w.once('message', resolve)
      w.once('error', reject)
    })
    expect(fromWorker.running).toBe(true)
    expect(fromWorker.ticks).toBeGreaterThan(0)
    const p = ms.stop()
    expect(p.version).toBe(1)
    // Rows carry weights: one row can stand for several intervals.
    expect(p.stats.samplesCaptured).toBe(p.samples.weight.reduce((a, w) => a + w, 0))
    expect(p.samples.thread.length).toBeLessThanOrEqual(p.stats.samplesCaptured)
    expect(p.stats.threadsSampled).toBe(p.stats.samplesCaptured + p.stats.samplesDropped)
    if (process.platform === 'linux') {
      // The stack-copy pool: 32 to 512 records of 48 KiB of stack each, plus headers.
      expect(p.stats.captureBufferBytes).toBeGreaterThanOrEqual(32 * 48 * 1024)
      expect(p.stats.captureBufferBytes).toBeLessThanOrEqual(512 * 64 * 1024)
    }
    expect(util.types.isUint32Array(p.samples.thread)).toBe(true)
    expect(util.types.isBigUint64Array(p.samples.timeNs)).toBe(true)
    expect(util.types.isUint32Array(p.samples.stack)).toBe(true)
    expect(util.types.isUint8Array(p.samples.idle)).toBe(true)
    expect(util.types.isUint32Array(p.stacks.frame)).toBe(true)
    expect(util.types.isInt32Array(p.stacks.parent)).toBe(true)
    expect(util.types.isBigUint64Array(p.frames.address)).toBe(true)
    expect(typeof p.startTimeNs).toBe('bigint')
    expect(p.intervalNs).toBe(1000000n)
    expect(p.endTimeNs).toBeGreaterThan(p.startTimeNs)
    expect(Math.abs(p.startWallTimeMs - Date.now())).toBeLessThan(10000)
    expect(p.threads.some((t) => t.isMain)).toBe(true)
    for (const t of p.threads) {
      expect(typeof t.tid).toBe('number')
      expect(typeof t.name).toBe('string')
    }
    // Every sample's stack resolves to a chain ending at a root.
    for (let i = 0; i < p.samples.stack.length; i += 7) {
      let n = p.samples.stack[i]
      let steps = 0
      while (n !== -1) {
        expect(n).toBeLessThan(p.stacks.frame.length)
        n = p.stacks.parent[n]
        expect(++steps).toBeLessThan(2000)
      }
    }
  })

  test('native unwinding flag round-trips', () => {
    ms.setNativeUnwinding(false)
    expect(ms.getNativeUnwinding()).toBe(false)
    ms.setNativeUnwinding(true)
    expect(ms.getNativeUnwinding()).toBe(true)
  })
})

describe('stop() does the common path in one call', () => {
  const fs = require('fs')
  const os = require('os')
  const path = require('path')
  let dir
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-stop-'))
  })
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }))

  function spin(ms) {
    const end = Date.now() + ms
    let x = 0
    while (Date.now() < end) x += Math.sqrt(x + 1)
    return x
  }

  test('symbolicate and output: named, and saved in the extension format', () => {
    ms.start({ intervalMs: 1 })
    spin(100)
    const out = path.join(dir, 'p.collapsed')
    const p = ms.stop({ symbolicate: true, output: out })
    expect(p.symbols).toBeDefined()
    expect(p.symbols.functions.name.length).toBeGreaterThan(0)
    const text = fs.readFileSync(out, 'utf8')
    // The file has the names the returned profile has.
    expect(text).toMatch(/spin/)
    expect(fs.readdirSync(dir)).toEqual(['p.collapsed'])
  })

  test('format overrides the extension; without symbolicate there are no names', () => {
    ms.start({ intervalMs: 1 })
    spin(30)
    const out = path.join(dir, 'p.bin')
    const p = ms.stop({ output: out, format: 'machprof' })
    expect(p.symbols).toBeUndefined()
    expect(ms.loadProfile(out).samples.thread.length).toBe(p.samples.thread.length)
  })

  test('bad options are refused before the sampler stops', () => {
    ms.start({ intervalMs: 5 })
    for (const [opts, part] of [
      [{ symbolicate: 1 }, 'options.symbolicate must be a boolean'],
      [{ output: 5 }, 'options.output must be a string'],
      [{ output: path.join(dir, 'x.unknown') }, 'cannot tell the format'],
      [{ output: path.join(dir, 'x.html'), format: 'gif' }, "unknown format 'gif'"],
      [{ format: 'html' }, 'need options.output'],
      [{ outptu: 'x.html' }, "unknown option 'outptu'"],
      [[], 'options must be an object'],
    ]) {
      let err
      try {
        ms.stop(opts)
      } catch (e) {
        err = e
      }
      expect([opts, err && err.code, err && err.message.includes(part)]).toEqual([opts, 'EINVAL', true])
      expect(ms.isRunning()).toBe(true)
    }
    expect(fs.readdirSync(dir)).toEqual([])
  })

  test('an output that cannot be written is refused before stopping', () => {
    ms.start({ intervalMs: 1 })
    spin(30)
    for (const [opts, code] of [
      [{ output: path.join(dir, 'missing', 'p.machprof') }, 'ENOENT'],
      [{ output: dir, format: 'machprof' }, 'EISDIR'],
    ]) {
      let err
      try {
        ms.stop(opts)
      } catch (e) {
        err = e
      }
      expect([opts, err && err.code]).toEqual([opts, code])
      expect(ms.isRunning()).toBe(true)
    }
    const file = path.join(dir, 'p.machprof')
    expect(ms.stop({ output: file }).samples.thread.length).toBeGreaterThan(0)
    expect(fs.existsSync(file)).toBe(true)
    fs.unlinkSync(file)
  })

  test('a write that fails after stopping hands the profile back on the error', () => {
    ms.start({ intervalMs: 1 })
    spin(30)
    let err
    try {
      // Writable, and full: the write itself fails.
      ms.stop({ output: '/dev/full', format: 'machprof' })
    } catch (e) {
      err = e
    }
    expect(err.code).toBe('ENOSPC')
    expect(err.message).toMatch(/error\.profile/)
    expect(ms.isRunning()).toBe(false)
    expect(err.profile.samples.thread.length).toBeGreaterThan(0)
  })
})

test('formats() lists every format once, with its extensions', () => {
  const f = ms.formats()
  expect(f.map((x) => x.name)).toEqual(['machprof', 'pprof', 'speedscope', 'firefox', 'cpuprofile', 'collapsed', 'html', 'svg'])
  for (const x of f) {
    expect(x.extensions.length).toBeGreaterThan(0)
    for (const e of x.extensions) expect(ms.formatFromPath(`a${e}`)).toBe(x.name)
    for (const a of x.aliases) expect(ms.parseFormatName(a)).toBe(x.name)
  }
})

// The Electron smoke test (__test__/electron, run by CI on real Electron)
// uses plain assertions mirroring these suites; run it here with a
// stand-in for Electron's `app`, so its checks keep up with the profile.
test('the Electron smoke test passes in Node with a stand-in for Electron', () => {
  const fs = require('fs')
  const { spawnSync } = require('child_process')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-fake-electron-'))
  try {
    fs.mkdirSync(path.join(dir, 'electron'))
    fs.writeFileSync(
      path.join(dir, 'electron', 'index.js'),
      'module.exports = { app: { whenReady: () => Promise.resolve(), exit: (code) => process.exit(code), dock: null } }\n',
    )
    const r = spawnSync(process.execPath, [path.join(__dirname, 'electron', 'main.js')], {
      env: { ...process.env, NODE_PATH: dir },
      encoding: 'utf8',
      timeout: 60000,
    })
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    const result = JSON.parse(r.stdout.trim().split('\n').pop())
    expect(result.ok).toBe(true)
    expect(result.namedSmokeJs).toBe(true)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
