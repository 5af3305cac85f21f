'use strict'
// The path users take: `npm pack` the package and the linux-x64 platform
// package, install both into a fresh project (only the npm registry is
// reached, for typescript), and use it there with CJS, ESM, the CLI and
// strict TypeScript. Also: the message when no prebuilt addon fits.
const { execFileSync, spawnSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

const ROOT = path.join(__dirname, '..')
const linuxX64 = process.platform === 'linux' && process.arch === 'x64'
const describeInstall = linuxX64 ? describe : describe.skip

function npm(args, cwd) {
  return execFileSync('npm', args, { cwd, encoding: 'utf8', env: { ...process.env, npm_config_update_notifier: 'false' } })
}

/**
 * The release addon (no test entry points): the copy `npm test` keeps in
 * target/release-addon, or a release build made here.
 */
function releaseAddon() {
  const kept = path.join(ROOT, 'target', 'release-addon', 'machsampler.linux-x64-gnu.node')
  if (fs.existsSync(kept)) return kept
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-release-'))
  execFileSync('npx', ['napi', 'build', '--platform', '--release', '--no-js', '--output-dir', out], { cwd: ROOT, stdio: 'inherit' })
  return path.join(out, 'machsampler.linux-x64-gnu.node')
}

function packJson(args, cwd) {
  const out = npm(['pack', '--json', '--ignore-scripts', ...args], cwd)
  return JSON.parse(out.slice(out.indexOf('[')))[0]
}

describeInstall('installed from npm pack tarballs into a fresh project', () => {
  let tmp
  let app
  let rootPack
  beforeAll(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-pkg-'))
    rootPack = packJson(['--pack-destination', tmp], ROOT)
    // The platform package: its package.json from npm/, plus the addon
    // this checkout built.
    const platformDir = path.join(tmp, 'platform')
    fs.mkdirSync(platformDir)
    fs.copyFileSync(path.join(ROOT, 'npm', 'linux-x64-gnu', 'package.json'), path.join(platformDir, 'package.json'))
    fs.copyFileSync(releaseAddon(), path.join(platformDir, 'machsampler.linux-x64-gnu.node'))
    const platformPack = packJson(['--pack-destination', tmp], platformDir)
    app = path.join(tmp, 'app')
    fs.mkdirSync(app)
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'fresh-app', version: '1.0.0', private: true }))
    npm(
      ['install', '--no-audit', '--no-fund', path.join(tmp, rootPack.filename), path.join(tmp, platformPack.filename), 'typescript@5', '@types/node@20'],
      app,
    )
  }, 300000)

  afterAll(() => {
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true })
  })

  test('the tarball holds only what users need', () => {
    const files = rootPack.files.map((f) => f.path).sort()
    for (const f of ['index.js', 'index.mjs', 'index.d.ts', 'binding.js', 'binding.d.ts', 'register.js', 'bin/machsampler.js', 'README.md', 'LICENSE', 'CHANGELOG.md', 'package.json']) {
      expect(files).toContain(f)
    }
    const forbidden = files.filter((f) => /^(src|target|__test__|bench|stress|scripts|npm|examples)\//.test(f) || f.endsWith('.node') || f.endsWith('.rs'))
    expect(forbidden).toEqual([])
  })

  test('require() loads the addon from the platform package and samples', () => {
    fs.writeFileSync(
      path.join(app, 'cjs.js'),
      `const ms = require('machsampler')
ms.start({ intervalMs: 1 })
const end = Date.now() + 200; let x = 0; while (Date.now() < end) x += Math.sqrt(x)
const p = ms.stop()
const mapped = require('fs').readFileSync('/proc/self/maps', 'utf8').split('\\n').find((l) => l.endsWith('.node'))
console.log(JSON.stringify({ samples: p.samples.weight.reduce((a, w) => a + w, 0), mapped }))`,
    )
    const out = JSON.parse(execFileSync(process.execPath, ['cjs.js'], { cwd: app, encoding: 'utf8' }))
    // 200 ms of CPU at 1 ms: samples (row weights), about 200.
    expect(out.samples).toBeGreaterThan(100)
    expect(out.mapped).toContain(path.join('node_modules', 'machsampler-linux-x64-gnu', 'machsampler.linux-x64-gnu.node'))
  })

  test('the installed addon exports only the public API', () => {
    const out = execFileSync(
      process.execPath,
      ['-e', `console.log(JSON.stringify(Object.keys(require(require.resolve('machsampler-linux-x64-gnu/machsampler.linux-x64-gnu.node')))))`],
      { cwd: app, encoding: 'utf8' },
    )
    const names = JSON.parse(out)
    expect(names).toContain('start')
    expect(names.filter((n) => n.startsWith('_'))).toEqual([])
  })

  test('import { start, stop } from an .mjs file', () => {
    fs.writeFileSync(
      path.join(app, 'esm.mjs'),
      `import { start, stop, symbolicate } from 'machsampler'
import ms from 'machsampler'
start({ intervalMs: 2 })
const end = Date.now() + 100; let x = 0; while (Date.now() < end) x += Math.sqrt(x)
const p = stop()
console.log(JSON.stringify({ samples: p.samples.weight.reduce((a, w) => a + w, 0), named: symbolicate(p).functions.name.length > 0, same: ms.stop === stop }))`,
    )
    const out = JSON.parse(execFileSync(process.execPath, ['esm.mjs'], { cwd: app, encoding: 'utf8' }))
    expect(out.samples).toBeGreaterThan(25)
    expect(out.named).toBe(true)
    expect(out.same).toBe(true)
  })

  test('npx machsampler record -- node app.js', () => {
    fs.writeFileSync(path.join(app, 'app.js'), `function busy() { const end = Date.now() + 600; let x = 0; while (Date.now() < end) x += Math.sqrt(x); return x }\nbusy()\n`)
    const r = spawnSync('npx', ['--no-install', 'machsampler', 'record', '-o', 'out.machprof', '--', 'node', 'app.js'], { cwd: app, encoding: 'utf8' })
    expect(r.status).toBe(0)
    expect(r.stderr).toMatch(/samples/)
    expect(fs.statSync(path.join(app, 'out.machprof')).size).toBeGreaterThan(100)
    const rep = spawnSync('npx', ['--no-install', 'machsampler', 'report', 'out.machprof'], { cwd: app, encoding: 'utf8' })
    expect(rep.status).toBe(0)
    expect(rep.stdout).toContain('busy')
  })

  test('tsc --noEmit --strict on code that uses the whole API', () => {
    fs.writeFileSync(
      path.join(app, 'use.ts'),
      `import * as ms from 'machsampler'
import type { Profile, Stats, StartOptions, SymbolTable, ProfileReport } from 'machsampler'

const opts: StartOptions = { intervalMs: 5, maxStackDepth: 64, nativeUnwinding: true, bufferSamples: 1000 }
ms.start(opts)
const live: Stats = ms.stats()
const n: number = live.samplesCaptured + ms.threadCount()
const running: boolean = ms.isRunning()
ms.setNativeUnwinding(false)
const unwinding: boolean = ms.getNativeUnwinding()
const p: Profile = ms.stop()
const stacks: Uint32Array = p.samples.stack
const times: BigUint64Array = p.samples.timeNs
const parent: Int32Array = p.stacks.parent
const addr: bigint = p.frames.address[0]
const s: SymbolTable = ms.symbolicate(p)
const name: string = s.functions.name[s.frameFunction[0]]
p.symbols = s
const buf: Buffer = ms.exportProfile(p, 'pprof')
const written: string = ms.saveProfile(p, 'x.machprof')
const again: Profile = ms.loadProfile(written)
const fmt: string = ms.formatFromPath('a.speedscope.json')
const report: ProfileReport = ms.profileReport(again, { top: 5, by: 'total' })
const sync = ms.withProfiler(() => 42, { intervalMs: 1 })
const answer: number = sync.result
const later = ms.withProfiler(async () => 'x')
later.then((r) => r.profile.samples.thread.length)
console.log(n, running, unwinding, stacks, times, parent, addr, name, buf.length, fmt, report.samples, answer)
`,
    )
    fs.writeFileSync(
      path.join(app, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { strict: true, noEmit: true, module: 'node16', moduleResolution: 'node16', target: 'es2022', types: ['node'] }, files: ['use.ts'] }),
    )
    const r = spawnSync(path.join(app, 'node_modules', '.bin', 'tsc'), ['-p', '.'], { cwd: app, encoding: 'utf8' })
    expect(r.stdout + r.stderr).toBe('')
    expect(r.status).toBe(0)
  })
})

describe('no prebuilt addon for the platform', () => {
  const load = (preload) =>
    spawnSync(process.execPath, ['-e', `${preload}; try { require(${JSON.stringify(ROOT)}) } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })) }`], {
      encoding: 'utf8',
    })

  test('Windows gets a clear message naming the platform and what to do', () => {
    const out = JSON.parse(load(`Object.defineProperty(process, 'platform', { value: 'win32' })`).stdout)
    expect(out.code).toBe('ERR_MACHSAMPLER_UNSUPPORTED_PLATFORM')
    expect(out.message).toContain('win32-x64')
    expect(out.message).toContain('Windows is not supported yet')
    expect(out.message).toContain('linux-x64-gnu, linux-arm64-gnu, darwin-x64, darwin-arm64')
  })

  test('musl gets a clear message too', () => {
    // Both the generated loader (it reads /usr/bin/ldd) and our message
    // (process.report) must see musl.
    const fake = `const fs = require('fs'); const read = fs.readFileSync
      fs.readFileSync = (f, ...a) => (f === '/usr/bin/ldd' ? 'musl libc' : read(f, ...a))
      process.report.getReport = () => ({ header: {} })`
    const out = JSON.parse(load(fake).stdout)
    expect(out.code).toBe('ERR_MACHSAMPLER_UNSUPPORTED_PLATFORM')
    expect(out.message).toMatch(/linux-\w+-musl/)
    expect(out.message).toContain('musl libc (Alpine) is not supported yet')
  })

  test('a supported platform whose package is missing says to reinstall or build', () => {
    const arch = process.arch === 'x64' ? 'arm64' : 'x64'
    const out = JSON.parse(load(`Object.defineProperty(process, 'platform', { value: 'darwin' }); Object.defineProperty(process, 'arch', { value: '${arch}' })`).stdout)
    expect(out.code).toBe('ERR_MACHSAMPLER_UNSUPPORTED_PLATFORM')
    expect(out.message).toContain(`machsampler-darwin-${arch} is missing`)
    // Built in a clone (an installed package has no sources), copied beside the loader.
    expect(out.message).toContain(`in a clone: npm install && npm run build) and copy machsampler.darwin-${arch}.node into ${ROOT}`)
  })

  test('the command line says so in one line, and --help and --version need no addon', () => {
    const cli = (args) =>
      spawnSync(process.execPath, ['-e', `Object.defineProperty(process, 'platform', { value: 'win32' }); require(${JSON.stringify(path.join(ROOT, 'lib', 'cli', 'main.js'))}).main(${JSON.stringify(args)})`], {
        encoding: 'utf8',
      })
    const v = cli(['--version'])
    expect([v.status, v.stdout.trim(), v.stderr]).toEqual([0, require('../package.json').version, ''])
    const help = cli(['--help'])
    expect([help.status, help.stderr]).toEqual([0, ''])
    expect(help.stdout).toContain('Usage: machsampler <command>')
    for (const args of [['report', 'x.machprof'], ['record', '-o', 'x.html', '--', process.execPath, '-e', '0']]) {
      const r = cli(args)
      expect(r.status).toBe(1)
      expect(r.stderr).toBe('machsampler: cannot run on win32-x64: Windows is not supported yet (builds exist for linux-x64-gnu, linux-arm64-gnu, darwin-x64, darwin-arm64).\n')
    }
  })
})

describe('versions in step', () => {
  test('every platform package and optional dependency has the root version', () => {
    const pkg = require('../package.json')
    const dirs = fs.readdirSync(path.join(ROOT, 'npm'))
    expect(dirs.sort()).toEqual(['darwin-arm64', 'darwin-x64', 'linux-arm64-gnu', 'linux-x64-gnu'])
    for (const d of dirs) {
      const sub = JSON.parse(fs.readFileSync(path.join(ROOT, 'npm', d, 'package.json'), 'utf8'))
      expect(sub.version).toBe(pkg.version)
      expect(pkg.optionalDependencies[sub.name]).toBe(pkg.version)
      expect(sub.os).toEqual([d.split('-')[0]])
      expect(sub.cpu).toEqual([d.split('-')[1]])
      if (d.startsWith('linux')) expect(sub.libc).toEqual(['glibc'])
    }
    expect(pkg.engines.node).toBe('>=18')
  })
})
