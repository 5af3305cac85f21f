'use strict'
// Files that tell the truth, checked by their readers' own code: a program
// that runs JavaScript at a known line and column, then waits (idle), is
// recorded in wall mode and written in every format.
// - Firefox: the Firefox Profiler's loader (@firefox-devtools/profiler-cli,
//   which needs Node 24) must see idle samples as idle;
// - .cpuprofile: line and column must be what V8's own --cpu-prof writes
//   for the same function, and idle time an `(idle)` node as there;
// - pprof: pprof-format decodes JS lines and columns (and `go tool pprof`
//   reads the file when Go is installed);
// - speedscope: its published schema, with line and column;
// - the HTML flame graph: headless Chromium at 1400×900 (playwright-core
//   driving the system Chromium) shows labelled frames on the first
//   screen, and a search that survives switching threads.

const fs = require('fs')
const path = require('path')
const zlib = require('zlib')
const { spawnSync } = require('child_process')
const Ajv = require('ajv')
const { Profile: PprofProfile } = require('pprof-format')
const h = require('./fixtures/cli-helpers')
const { fetchNode } = require('../scripts/fetch-node')

const FIXTURE = path.join(__dirname, 'fixtures', 'busy-then-idle.js')
const PROFILER_CLI = require.resolve('@firefox-devtools/profiler-cli/dist/profiler-cli.js')
const SPEEDSCOPE_SCHEMA = require.resolve('speedscope/dist/release/file-format-schema.json')
const FN = 'spinForReaders'

let dir
let recorded
let v8Frame // the function's callFrame in V8's own --cpu-prof

beforeAll(() => {
  dir = h.tmpdir('readers')
  recorded = path.join(dir, 'idle.machprof')
  const r = h.cli(['record', '--mode', 'wall', '-q', '-o', recorded, '--', process.execPath, FIXTURE])
  if (r.status !== 0) throw new Error(`record failed (${r.status}): ${r.stderr}`)
  const cpuDir = path.join(dir, 'v8')
  const v = spawnSync(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${cpuDir}`, FIXTURE], { encoding: 'utf8' })
  if (v.status !== 0) throw new Error(v.stderr)
  const prof = JSON.parse(fs.readFileSync(path.join(cpuDir, fs.readdirSync(cpuDir)[0]), 'utf8'))
  v8Frame = prof.nodes.find((n) => n.callFrame.functionName === FN).callFrame
}, 120000)

afterAll(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true })
})

function convert(name, extra = []) {
  const out = path.join(dir, name)
  const r = h.cli(['convert', recorded, '-o', out, ...extra])
  expect(r.status).toBe(0)
  return out
}

test('.cpuprofile: lines and columns as V8 writes them, idle time in an (idle) node', () => {
  const p = JSON.parse(fs.readFileSync(convert('idle.cpuprofile'), 'utf8'))
  // The name alone, as V8 writes it; the location in its own fields.
  const fn = p.nodes.find((n) => n.callFrame.functionName === FN)
  expect(fn.callFrame.url).toBe(v8Frame.url)
  expect([fn.callFrame.lineNumber, fn.callFrame.columnNumber]).toEqual([v8Frame.lineNumber, v8Frame.columnNumber])
  const idle = p.nodes.find((n) => n.callFrame.functionName === '(idle)')
  expect(idle).toBeDefined()
  expect(p.nodes[0].children).toContain(idle.id)
  // The program waited 600 ms of its ~1.1 s: most samples are idle, and
  // none of them is attributed to epoll_wait any more.
  const hits = (id) => p.samples.filter((s) => s === id).length
  expect(hits(idle.id)).toBeGreaterThan(p.samples.length * 0.3)
  const epoll = p.nodes.filter((n) => /epoll_p?wait/.test(n.callFrame.functionName))
  expect(epoll.reduce((n, e) => n + hits(e.id), 0)).toBe(0)
  // One entry per interval, time moving forward.
  expect(p.samples).toHaveLength(p.timeDeltas.length)
  expect(p.timeDeltas.every((d) => d >= 0)).toBe(true)
})

test('pprof: pprof-format decodes JS lines and columns; go tool pprof reads it when installed', () => {
  const file = convert('idle.pb.gz')
  const prof = PprofProfile.decode(zlib.gunzipSync(fs.readFileSync(file)))
  const str = (i) => prof.stringTable.strings[Number(i)]
  const fn = prof.function.find((f) => str(f.name).startsWith(`${FN} (`))
  expect(Number(fn.startLine)).toBe(v8Frame.lineNumber + 1)
  const lines = prof.location.flatMap((l) => l.line).filter((l) => l.functionId === fn.id)
  expect(lines.length).toBeGreaterThan(0)
  for (const l of lines) {
    expect(Number(l.line)).toBe(v8Frame.lineNumber + 1) // 1-based in pprof
    expect(Number(l.column)).toBe(v8Frame.columnNumber + 1)
  }
  // Idle samples carry the state label.
  const state = prof.sample.map((s) => s.label.find((l) => str(l.key) === 'state')).map((l) => str(l.str))
  expect(state).toContain('idle')
  expect(state).toContain('running')
  const go = spawnSync('go', ['tool', 'pprof', '-raw', file], { encoding: 'utf8' })
  if (!go.error) {
    expect(go.status).toBe(0)
    expect(go.stdout).toContain(FN)
  }
})

test('speedscope: the published schema, with JS lines and columns', () => {
  const file = JSON.parse(fs.readFileSync(convert('idle.speedscope.json'), 'utf8'))
  const validate = new Ajv({ strict: false }).compile(JSON.parse(fs.readFileSync(SPEEDSCOPE_SCHEMA, 'utf8')))
  expect(validate(file) ? [] : validate.errors).toEqual([])
  const frame = file.shared.frames.find((f) => f.name.startsWith(`${FN} (`))
  expect([frame.line, frame.col]).toEqual([v8Frame.lineNumber + 1, v8Frame.columnNumber + 1])
})

describe('Firefox Profiler', () => {
  let node24
  const env = () => ({ ...process.env, PROFILER_CLI_SESSION_DIR: path.join(dir, 'pq') })
  const pq = (args) => {
    const r = spawnSync(node24, [PROFILER_CLI, ...args], { encoding: 'utf8', env: env(), timeout: 60000 })
    if (r.status !== 0) throw new Error(`profiler-cli ${args.join(' ')}: ${r.status}\n${r.stdout}\n${r.stderr}`)
    return r.stdout
  }

  beforeAll(() => {
    node24 = fetchNode(24)
  }, 300000)

  afterAll(() => {
    if (node24) spawnSync(node24, [PROFILER_CLI, 'stop', '--all'], { env: env(), timeout: 30000 })
  })

  test("its own loader sees idle samples as idle, threads by role, and the program's functions", () => {
    const file = convert('idle.fxprof.json')
    pq(['load', file])
    const threads = pq(['thread', 'list'])
    expect(threads).toMatch(/V8 worker/)
    const main = /^\*? *(t-\d+) +node .*busy-then-idle\.js/m.exec(threads)
    expect(main).not.toBeNull()
    pq(['thread', 'select', main[1]])
    const running = pq(['thread', 'samples'])
    const all = pq(['thread', 'samples', '--include-idle'])
    const count = (text) => Number(/Categories \(([\d,]+) (running )?samples\)/.exec(text)[1].replace(/,/g, ''))
    // Idle samples are left out of the running ones, and shown as Idle.
    expect(count(running)).toBeLessThan(count(all) * 0.7)
    expect(all).toMatch(/^ +Idle +█*\s+\d+/m)
    expect(running).not.toMatch(/^ +Idle /m)
    expect(running).toContain(FN)
  }, 120000)
})

describe('HTML flame graph in headless Chromium', () => {
  let browser
  beforeAll(async () => {
    const { chromium } = require('playwright-core')
    browser = await chromium.launch({ executablePath: h.chromiumPath(), args: ['--no-sandbox'] })
  }, 60000)
  afterAll(async () => {
    if (browser) await browser.close()
  })

  test('at 1400×900 the first screen shows labelled frames; the thread picker keeps the search', async () => {
    const demo = path.join(dir, 'demo.machprof')
    const rec = h.cli(['record', '-q', '-o', demo, '--', process.execPath, h.DEMO], { env: { DEMO_DURATION_MS: '1500' } })
    expect(rec.status).toBe(0)
    const html = path.join(dir, 'demo.html')
    expect(h.cli(['convert', demo, '-o', html]).status).toBe(0)
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } })
    await page.goto(`file://${html}`)
    const png = path.join(dir, 'flamegraph.png')
    await page.screenshot({ path: png })
    if (process.env.MACHSAMPLER_SCREENSHOT) fs.copyFileSync(png, process.env.MACHSAMPLER_SCREENSHOT)
    // Frames with readable labels inside the first screen.
    const visible = () =>
      page.$$eval('.f', (els) =>
        els
          .map((e) => ({ r: e.getBoundingClientRect(), text: e.textContent }))
          .filter(({ r, text }) => r.top >= 0 && r.bottom <= 900 && r.width > 40 && text.length > 3)
          .map(({ text }) => text),
      )
    const labels = await visible()
    expect(labels.length).toBeGreaterThan(20)
    expect(labels).toContain('all threads')
    expect(labels.some((l) => /^main \(\d+\)$/.test(l))).toBe(true)
    const { ink, colours } = h.inkAndColours(h.readPng(png))
    expect(ink).toBeGreaterThan(0.1)
    expect(colours).toBeGreaterThan(5)

    // Search, then switch threads: the term, its highlight and the share stay.
    await page.fill('#search', 'fibonacciOnMainThread')
    expect(await page.textContent('#matched')).toMatch(/^Matched: [\d.]+% of all threads/)
    const main = await page.$eval('#thread', (s) => [...s.options].find((o) => /^main \(/.test(o.textContent)).value)
    await page.selectOption('#thread', main)
    expect(await page.inputValue('#search')).toBe('fibonacciOnMainThread')
    expect(await page.textContent('#matched')).toMatch(/^Matched: [1-9][\d.]*% of main/)
    expect(await page.$$eval('.f.hit', (els) => els.length)).toBeGreaterThan(0)
    expect(await page.evaluate(() => location.hash)).toMatch(/s=fibonacciOnMainThread&t=\d+/)
    // The first screen of one thread is labelled too.
    expect((await visible()).length).toBeGreaterThan(10)
    // Clicking a frame zooms into it; Reset zoom goes back.
    await page.click('.f.hit')
    expect(await page.$$eval('.f.anc', (els) => els.length)).toBeGreaterThan(0)
    await page.click('#reset')
    expect(await page.$$eval('.f.anc', (els) => els.length)).toBe(0)
    await page.close()
  }, 180000)

  test('a name with quotes and markup stays text: no attribute injected, no script run; a bad #t= draws all threads', async () => {
    // A computed method name is the function's name in V8's code events.
    const evil = `x" onmouseover="document.title='PWNED'" y="<b>&'`
    const script = path.join(dir, 'quotes.js')
    fs.writeFileSync(
      script,
      `const o = { ${JSON.stringify(evil)}() { let s = 0; const t = Date.now(); while (Date.now() - t < 600) s += Math.sqrt(s + 1); return s } }\n` +
        `o[${JSON.stringify(evil)}]()\n`,
    )
    const rec = path.join(dir, 'quotes.machprof')
    expect(h.cli(['record', '-q', '--interval', '2', '-o', rec, '--', process.execPath, script]).status).toBe(0)
    const html = path.join(dir, 'quotes.html')
    expect(h.cli(['convert', rec, '-o', html]).status).toBe(0)
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } })
    const errors = []
    page.on('pageerror', (e) => errors.push(e.message))
    await page.goto(`file://${html}#t=1.5`)
    const frames = await page.$$eval('.f', (els) => els.map((e) => ({ title: e.getAttribute('title'), handler: e.getAttribute('onmouseover') })))
    expect(errors).toEqual([])
    expect(frames.length).toBeGreaterThan(3)
    expect(frames.filter((f) => f.handler !== null)).toEqual([])
    const named = frames.find((f) => f.title.startsWith(evil))
    expect(named).toBeDefined()
    const el = await page.evaluateHandle((t) => [...document.querySelectorAll('.f')].find((e) => e.getAttribute('title') === t), named.title)
    await el.asElement().hover({ force: true })
    expect(await page.title()).not.toBe('PWNED')
    // #t=1.5 is no thread, nor is an empty ?t=: the picker shows all threads.
    expect(await page.inputValue('#thread')).toBe('-1')
    await page.goto(`file://${html}?t=`)
    expect(await page.inputValue('#thread')).toBe('-1')
    expect(errors).toEqual([])
    await page.close()
  }, 180000)
})
