'use strict'
// Electron smoke test: the addon in Electron's main process. Run it from the
// package root, after building the addon for this platform:
//
//   npx electron __test__/electron                     # macOS
//   xvfb-run -a npx electron --no-sandbox __test__/electron   # Linux CI
//
// It starts and stops the sampler around busy work (zlib on the main
// thread), symbolicates, saves the profile as .machprof and .html, loads the
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

function busy(msec) {
  const end = Date.now() + msec
  const input = Buffer.alloc(1 << 20, 'machsampler electron smoke ')
  let bytes = 0
  while (Date.now() < end) bytes += zlib.deflateSync(input).length
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
  assert.deepEqual(again.threads, profile.threads)
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
    // MACHSAMPLER_NO_JS_NAMES here means JavaScript frames were not named
    // from V8 in this Electron (see the README's Electron section).
    warnings,
  }
}

if (process.platform === 'darwin' && app.dock) app.dock.hide()
const watchdog = setTimeout(() => {
  console.error('electron smoke: no result after 120 s')
  app.exit(2)
}, 120000)
app.whenReady().then(() => {
  let status = 0
  try {
    console.log(JSON.stringify(run()))
  } catch (e) {
    console.error('electron smoke FAILED:', (e && e.stack) || e)
    status = 1
  }
  clearTimeout(watchdog)
  app.exit(status)
})
