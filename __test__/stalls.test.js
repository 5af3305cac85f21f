'use strict'
// watchStalls(): each case runs in a fresh process (__test__/fixtures/stalls.js)
// with the allocation check armed. Durations are compared with what the
// program measured around its own block (±10 %), never with fixed times;
// speed, memory and latency targets are in bench/sections/stalls.js.

const fs = require('fs')
const os = require('os')
const path = require('path')
const { spawnSync } = require('child_process')
const ms = require('..')
const h = require('./fixtures/cli-helpers')

const FIXTURE = path.join(__dirname, 'fixtures', 'stalls.js')

function run(name, options = {}, { timeoutMs = 60000 } = {}) {
  const r = spawnSync(process.execPath, [FIXTURE, name, JSON.stringify(options)], {
    env: { ...process.env, MACHSAMPLER_ALLOC_CHECK: '1' },
    encoding: 'utf8',
    timeout: timeoutMs,
    maxBuffer: 64 << 20,
  })
  if (r.status !== 0) throw new Error(`stalls ${name} failed: status ${r.status} signal ${r.signal}\n${r.stderr}`)
  return { lines: r.stdout.trim().split('\n').map((l) => JSON.parse(l)), stderr: r.stderr }
}

function expectWithin10Percent(reported, measured) {
  expect(Math.abs(reported - measured)).toBeLessThanOrEqual(0.1 * measured)
}

/** The checks every reported block shares. */
function expectOneStallOf(result, blocking, { keepMs = 1000 } = {}) {
  const { block, stalls } = result
  expect(stalls).toHaveLength(1)
  const [stall] = stalls
  // About 300 ms (the machine is shared: native calibration may be off).
  expect(block.durationMs).toBeGreaterThan(200)
  expectWithin10Percent(stall.durationMs, block.durationMs)
  // It began when the block did, on the profile's clock (the process's monotonic one).
  expect(Math.abs(stall.startMs - block.startMs)).toBeLessThan(25)
  expect(stall.summary).toMatch(/^machsampler: the event loop of the main thread \(tid \d+\) stalled for \d+ ms\n/)
  expect(stall.summary).toContain(blocking)
  // The profile covers keepMs before the stall and the stall, every thread, named.
  expect(stall.profile.symbolicated).toBe(true)
  expect(stall.profile.startMs).toBeLessThanOrEqual(stall.startMs - keepMs + 1)
  expect(stall.profile.endMs).toBeGreaterThanOrEqual(stall.startMs + stall.durationMs - 1)
  expect(stall.profile.threads).toBeGreaterThanOrEqual(1)
  // The stalled thread was sampled during the stall (faster, from half the threshold on).
  expect(stall.profile.stalledSampledMs).toBeGreaterThan(0.2 * stall.durationMs)
  expect(stall.thread.isMain).toBe(true)
  return stall
}

describe('watchStalls detects a stall once, with its duration and what blocked', () => {
  test('a 300 ms block in native code (crypto.pbkdf2Sync)', () => {
    const { lines } = run('block', { kind: 'native', ms: 300 })
    const stall = expectOneStallOf(lines[0], 'pbkdf2Sync')
    // The native side of it is named too.
    expect(stall.summary).toMatch(/PBKDF2|pbkdf2_derive|HMAC|sha512/i)
  })

  test('a 300 ms busy JavaScript function, with another thread busy meanwhile', () => {
    const { lines } = run('block', { kind: 'js', ms: 300, busyWorker: true })
    const stall = expectOneStallOf(lines[0], 'spinBusy')
    expect(stall.summary).toMatch(/in JavaScript: spinBusy /)
    // Every thread that ran is in the profile, and the busy one is named.
    expect(stall.profile.threads).toBeGreaterThan(1)
    expect(stall.summary).toMatch(/other threads busy during the stall:\n {4}.* \(tid \d+\): [\d.]+ ms on CPU, most in /)
  })

  test('a worker that calls watchStalls itself is watched, and its stall is its own', () => {
    const { lines } = run('worker', { ms: 300 })
    const [r] = lines
    expect(r.stalls).toHaveLength(1)
    const [stall] = r.stalls
    expect(stall.thread.isMain).toBe(false)
    expect(stall.thread.tid).toBe(r.workerTid)
    expect(r.workerTid).not.toBe(r.mainTid)
    expectWithin10Percent(stall.durationMs, r.block.durationMs)
    expect(stall.summary).toMatch(/^machsampler: the event loop of thread '.*' \(tid \d+\) stalled for/)
    expect(stall.summary).toContain('spinBusy')
  })

  test('the process exits during a stall: it is handed to onStall from exit', () => {
    const { lines } = run('exitDuringStall', { kind: 'js' })
    const block = lines.find((l) => l.block).block
    const stalls = lines.filter((l) => l.stall).map((l) => l.stall)
    expect(stalls).toHaveLength(1)
    // Cut at exit: at least the block, a little more for the exit itself.
    expect(stalls[0].durationMs).toBeGreaterThanOrEqual(block.durationMs - 1)
    expect(stalls[0].summary).toContain('has not turned for')
    expect(stalls[0].summary).toContain('spinBusy')
  })
})

test('an exception thrown by onStall is an uncaught exception, with its message and stack', () => {
  const script = `
    const ms = require(${JSON.stringify(path.join(__dirname, '..'))})
    const w = ms.watchStalls({ thresholdMs: 50, onStall() { throw new Error('thrown by onStall') } })
    const t = Date.now(); while (Date.now() - t < 200);
    setTimeout(() => { console.log('not reached'); w.close() }, 300)`
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 30000 })
  expect(r.status).toBe(1)
  expect(r.stderr).toContain('Error: thrown by onStall')
  expect(r.stderr).not.toContain('DEP0168')
  expect(r.stdout).not.toContain('not reached')
})

test('close() during a stall: nothing is reported, and a new watcher works after', () => {
  const { lines } = run('closeDuringStall')
  const [r] = lines
  expect(r.stalls).toEqual([])
  expect(r.again).toHaveLength(1)
  expect(r.again[0].summary).toContain('spinBusy')
  expect(r.running).toBe(false)
})

test('no false stall from a busy but responsive server (timers every 10 ms, loopback HTTP) for 4 s', () => {
  const { lines } = run('server', { seconds: 4, thresholdMs: 200 })
  const [r] = lines
  expect(r.stalls).toEqual([])
  // It was busy: the timers ran and the requests were served.
  expect(r.ticks).toBeGreaterThan(150)
  expect(r.requests).toBeGreaterThan(200)
  expect(r.stats.historyRows).toBeGreaterThan(0)
})

describe('alongside start()/stop()', () => {
  test('a stall during a session is reported, and the session profile is not changed by the fast samples', () => {
    const { lines } = run('block', { kind: 'js', ms: 300, session: 'cpu' })
    const [r] = lines
    expectOneStallOf(r, 'spinBusy')
    // The session sampled every 10 ms of CPU: the main thread weighs no more
    // than its wall time (the 1 ms captures stayed out of it).
    expect(r.session.rows).toBeGreaterThan(0)
    expect(r.session.mainWeight * 10).toBeLessThanOrEqual(r.session.seconds * 1000 * 1.1)
  })

  test('a session that starts and stops while watching leaves the watcher working', () => {
    const { lines } = run('block', { kind: 'native', ms: 300, sessionBefore: true })
    expectOneStallOf(lines[0], 'pbkdf2Sync')
  })
})

describe('bad options are EINVAL errors that name the range', () => {
  const onStall = () => {}
  test.each([
    [{ thresholdMs: 19, onStall }, 'thresholdMs must be an integer from 20 to 60000'],
    [{ thresholdMs: 60001, onStall }, 'thresholdMs must be an integer from 20 to 60000'],
    [{ thresholdMs: 100.5, onStall }, 'thresholdMs must be an integer from 20 to 60000'],
    [{ keepMs: -1, onStall }, 'keepMs must be an integer from 0 to 60000'],
    [{ keepMs: 60001, onStall }, 'keepMs must be an integer from 0 to 60000'],
    [{ intervalMs: 0, onStall }, 'intervalMs must be an integer from 1 to 1000'],
    [{ intervalMs: 1001, onStall }, 'intervalMs must be an integer from 1 to 1000'],
    [{ intervalMs: '10', onStall }, 'options.intervalMs must be a number, an integer from 1 to 1000, got string'],
    [{ stallIntervalMs: 0, onStall }, 'stallIntervalMs must be an integer from 1 to 1000'],
    [{ hangAfterMs: 1000, onStall }, 'hangAfterMs needs hangDir'],
    [{ thresholdMs: 200 }, 'options.onStall must be a function'],
    [{ onStall: 5 }, 'options.onStall must be a function'],
    [{ threshold: 200, onStall }, "unknown option 'threshold'; valid options are thresholdMs, keepMs, intervalMs"],
    [undefined, 'options.onStall must be a function'],
    [[], 'options must be an object'],
  ])('%p', (options, message) => {
    let error
    try {
      ms.watchStalls(options)
    } catch (e) {
      error = e
    }
    // (Errors made by the addon belong to Node's realm, not jest's: no instanceof.)
    expect(error && error.name).toBe('Error')
    expect(error.code).toBe('EINVAL')
    expect(error.message).toContain(message)
    // Nothing was started.
    expect(ms.isRunning()).toBe(false)
  })

  test('hangDir must be a directory that can be written now; a hang that cannot be written is counted apart', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-hangdir-'))
    const file = path.join(dir, 'file')
    fs.writeFileSync(file, '')
    const refused = (hangDir) => {
      try {
        ms.watchStalls({ thresholdMs: 50, hangAfterMs: 200, hangDir, onStall }).close()
      } catch (e) {
        return [e.code, e.message]
      }
      return null
    }
    expect(refused(path.join(dir, 'missing'))).toEqual(['ENOENT', expect.stringContaining('missing')])
    expect(refused(file)).toEqual(['ENOTDIR', `hangDir '${file}' is not a directory`])
    // Read-only for root too.
    expect(refused('/sys/kernel')).toEqual(['EACCES', expect.stringContaining("hangDir '/sys/kernel' cannot be written")])
    expect(h.listDir(dir)).toEqual(['file'])
    // The directory goes away after the check: the hang is not claimed.
    const gone = path.join(dir, 'gone')
    fs.mkdirSync(gone)
    const program = [
      `const ms = require(${JSON.stringify(path.join(__dirname, '..'))}); const fs = require('fs')`,
      `const w = ms.watchStalls({ thresholdMs: 50, hangAfterMs: 150, hangDir: ${JSON.stringify(gone)}, onStall() {} })`,
      `fs.rmdirSync(${JSON.stringify(gone)})`,
      'setTimeout(() => { const end = Date.now() + 700; while (Date.now() < end); setTimeout(() => { console.log(JSON.stringify(w.stats())); w.close() }, 300) }, 50)',
    ].join('\n')
    const r = require('child_process').spawnSync(process.execPath, ['-e', program], { encoding: 'utf8', timeout: 30000 })
    expect(r.status).toBe(0)
    const stats = JSON.parse(r.stdout)
    expect([stats.hangs, stats.hangsNotWritten]).toEqual([0, 1])
    fs.rmSync(dir, { recursive: true, force: true })
  })

  test('a stray second argument is refused', () => {
    expect(() => ms.watchStalls({ onStall }, {})).toThrow(/watchStalls/)
    const w = ms.watchStalls({ onStall })
    expect(() => w.stats(1)).toThrow(expect.objectContaining({ code: 'EINVAL', message: 'stats() takes no arguments, got 1' }))
    expect(() => w.close(1)).toThrow(expect.objectContaining({ code: 'EINVAL', message: 'close() takes no arguments, got 1' }))
    w.close()
  })
})

describe('machsampler record --stalls', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-stalls-'))
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

  test("a stall's summary shows control characters of names escaped, as the rest does", () => {
    const program = [
      // A string key (not a computed one) is the method's name in V8.
      "const o = { '\\x1b[31mREDBLOCK'() { const end = Date.now() + 300; while (Date.now() < end); } }",
      "setTimeout(() => o['\\x1b[31mREDBLOCK'](), 300)",
      'setTimeout(() => {}, 900)',
    ].join(';')
    const r = h.cli(['record', '--stalls', '100', '-o', path.join(dir, 'esc.machprof'), '--', process.execPath, '-e', program])
    expect(r.status).toBe(0)
    expect(r.stderr).toMatch(/stall 1: wrote/)
    expect(r.stderr).toContain('\\x1b[31mREDBLOCK')
    expect(r.stderr).not.toContain('\x1b')
  })

  test('writes <output>-stall-<n>.<ext> for each stall and prints its summary', () => {
    const program = [
      "const { spinBusy } = require(process.argv[1])",
      'setTimeout(() => spinBusy(300), 1200)',
      'setTimeout(() => {}, 2000)',
    ].join(';')
    const out = path.join(dir, 'run.speedscope.json')
    const r = h.cli(['record', '--stalls', '100', '-o', out, '--', process.execPath, '-e', program, path.join(__dirname, 'fixtures', 'stalls-spin.js')])
    expect(r.status).toBe(0)
    const stallFile = path.join(dir, 'run-stall-1.speedscope.json')
    expect(fs.existsSync(out)).toBe(true)
    expect(fs.existsSync(stallFile)).toBe(true)
    expect(fs.existsSync(path.join(dir, 'run-stall-2.speedscope.json'))).toBe(false)
    expect(JSON.parse(fs.readFileSync(stallFile, 'utf8')).$schema).toMatch(/speedscope/)
    expect(r.stderr).toContain(`machsampler: stall 1: wrote ${stallFile} (speedscope)`)
    expect(r.stderr).toMatch(/the event loop of the main thread \(tid \d+\) stalled for \d+ ms/)
    expect(r.stderr).toContain('spinBusy')
  })

  test.each([['10'], ['60001'], ['abc']])('--stalls %s is a usage error naming the range', (value) => {
    const out = path.join(dir, 'bad.machprof')
    const r = h.cli(['record', '--stalls', value, '-o', out, '--', process.execPath, '-e', '0'])
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/--stalls/)
    if (value !== 'abc') expect(r.stderr).toContain('from 20 to 60000')
    expect(fs.existsSync(out)).toBe(false)
  })
})
