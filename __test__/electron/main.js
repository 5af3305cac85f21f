'use strict'
// Electron smoke test: the addon in Electron's main process. Run it from the
// package root, after building the addon for this platform:
//
//   npx electron __test__/electron                     # macOS
//   xvfb-run -a npx electron --no-sandbox __test__/electron   # Linux CI
//
// It starts and stops the sampler around busy work (zlib and a JavaScript
// loop on the main thread), symbolicates, saves the profile as .machprof and .html, loads the
// .machprof back, and checks all of it with the assertions of the Node
// suites (checks.js). Prints one JSON line and exits 0, or prints the failure
// and exits 1. No window is opened.

const assert = require('assert/strict')
const fs = require('fs')
const os = require('os')
const path = require('path')
const zlib = require('zlib')
const { app } = require('electron')
const { checkProfile, checkSampling, checkSymbols } = require('./checks')

const INTERVAL_MS = 5
const BUSY_MS = 1500

const warnings = []
process.on('warning', (w) => warnings.push(`${w.code || w.name}: ${w.message}`))

// JavaScript the sampler must name from V8 (when this Electron's V8 is in
// the accepted ranges).
function electronSmokeJs(rounds) {
  let x = 0
  for (let i = 0; i < rounds; i++) x = (Math.imul(x, 31) + i) | 0
  return x
}

function busy(msec) {
  const end = Date.now() + msec
  const input = Buffer.alloc(1 << 18, 'machsampler electron smoke ')
  let bytes = 0
  while (Date.now() < end) {
    bytes += zlib.deflateSync(input).length
    bytes += electronSmokeJs(2e6) & 1
  }
  return bytes
}

function run() {
  const ms = require(path.join(__dirname, '..', '..'))
  ms.start({ intervalMs: INTERVAL_MS })
  assert.equal(ms.isRunning(), true)
  busy(BUSY_MS)
  const profile = ms.stop()
  assert.equal(ms.isRunning(), false)
  checkProfile(profile, { intervalMs: INTERVAL_MS })
  const threads = checkSampling(profile, { intervalMs: INTERVAL_MS, busyMs: BUSY_MS })

  profile.symbols = ms.symbolicate(profile)
  const named = checkSymbols(profile)

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-electron-'))
  const machprof = path.join(dir, 'electron.machprof')
  assert.equal(ms.saveProfile(profile, machprof), 'machprof')
  const again = ms.loadProfile(machprof)
  checkProfile(again, { intervalMs: INTERVAL_MS })
  assert.equal(again.samples.thread.length, profile.samples.thread.length)
  // A saved profile adds each thread's role; the rest comes back as it was.
  const plain = ({ tid, pid, name, isMain }) => ({ tid, pid, name, isMain })
  assert.deepEqual(again.threads.map(plain), profile.threads.map(plain))
  assert.deepEqual(again.symbols.functions.name, profile.symbols.functions.name)
  const html = path.join(dir, 'electron.html')
  assert.equal(ms.saveProfile(profile, html), 'html')
  assert.match(fs.readFileSync(html, 'utf8'), /<svg|<html/i)
  fs.rmSync(dir, { recursive: true, force: true })

  return {
    ok: true,
    electron: process.versions.electron,
    v8: process.versions.v8,
    platform: `${process.platform}-${process.arch}`,
    samples: profile.samples.thread.length,
    threads: threads.size,
    mainThreadSamples: [...threads.values()].find((t) => t.isMain).samples,
    namedNative: named.length,
    someNames: named.slice(0, 8),
    jsFunctions: profile.symbols.functions.kind.filter((k) => k === 'js').length,
    namedSmokeJs: profile.symbols.functions.name.some((n, i) => profile.symbols.functions.kind[i] === 'js' && n.startsWith('electronSmokeJs')),
    warnings,
  }
}

/**
 * After the warnings of stop() have been emitted (on the next tick): the
 * busy JavaScript is named, unless machsampler said that it cannot name
 * JavaScript from this Electron's V8 (MACHSAMPLER_NO_JS_NAMES).
 */
function checkJsNames(result) {
  if (result.warnings.some((w) => w.startsWith('MACHSAMPLER_NO_JS_NAMES'))) return
  assert.ok(result.namedSmokeJs, `electronSmokeJs was not named (V8 ${result.v8}, ${result.jsFunctions} JavaScript functions)`)
}

if (process.platform === 'darwin' && app.dock) app.dock.hide()
const watchdog = setTimeout(() => {
  console.error('electron smoke: no result after 120 s')
  app.exit(2)
}, 120000)
app.whenReady().then(() => {
  let result
  try {
    result = run()
  } catch (e) {
    console.error('electron smoke FAILED:', (e && e.stack) || e)
    clearTimeout(watchdog)
    app.exit(1)
    return
  }
  setImmediate(() => {
    let status = 0
    try {
      checkJsNames(result)
      console.log(JSON.stringify(result))
    } catch (e) {
      console.error('electron smoke FAILED:', (e && e.stack) || e, JSON.stringify(result))
      status = 1
    }
    clearTimeout(watchdog)
    app.exit(status)
  })
})
