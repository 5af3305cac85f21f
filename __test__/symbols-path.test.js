'use strict'
// Names from symbol files: Mach-O profiles (stripped or not, with or
// without a dSYM), Breakpad files served by a symbol server on 127.0.0.1
// (and the ways a server fails), the CLI's --symbol-path, and compiled
// TypeScript shown at its .ts lines. Darwin profiles are built by hand
// from the committed Mach-O fixtures, so this runs on Linux too.
const fs = require('fs')
const http = require('http')
const os = require('os')
const path = require('path')
const { spawnSync, spawn } = require('child_process')

const ms = require('..')

const FIX = path.join(__dirname, 'fixtures', 'symbols')
const CLI = path.join(__dirname, '..', 'bin', 'machsampler.js')

/** FUNC records of a Breakpad file: the truth about where functions are. */
function functionsOf(symFile) {
  return fs
    .readFileSync(symFile, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('FUNC '))
    .map((l) => {
      const [, rva, size, , ...name] = l.replace(/^FUNC m /, 'FUNC ').split(' ')
      return { name: name.join(' '), rva: parseInt(rva, 16), size: parseInt(size, 16) }
    })
}

function symFile(dir) {
  const root = path.join(dir, 'breakpad')
  const [name] = fs.readdirSync(root)
  const [id] = fs.readdirSync(path.join(root, name))
  return { file: path.join(root, name, id, `${name}.sym`), name, id }
}

function uuidOf(symId) {
  return symId.slice(0, 32).toLowerCase()
}

const BIAS = 0x10000000n

/** A profile with one sample per address (each a lone leaf frame). */
function profileOf(platform, modules, addresses) {
  const n = addresses.length
  return {
    version: 1,
    meta: { platform, arch: 'aarch64', pid: 1 },
    threads: [{ tid: 1, name: 'main', isMain: true }],
    samples: {
      thread: new Uint32Array(n),
      timeNs: BigUint64Array.from(addresses.map((_, i) => BigInt(i + 1))),
      stack: Uint32Array.from(addresses.map((_, i) => i)),
      idle: new Uint8Array(n),
      cpuDeltaNs: new BigUint64Array(n),
    },
    stacks: { frame: Uint32Array.from(addresses.map((_, i) => i)), parent: new Int32Array(n).fill(-1) },
    frames: { address: BigUint64Array.from(addresses) },
    modules,
    startTimeNs: 0n,
    endTimeNs: BigInt(n + 1),
    intervalNs: 1000000n,
    startWallTimeMs: Date.now(),
    stats: {},
    jsNames: [],
  }
}

/** A one-module profile: every function of `dir`'s library, at a few offsets each. */
function libraryProfile(dir, binary, platform = 'darwin') {
  const sym = symFile(dir)
  const fns = functionsOf(sym.file)
  const addrs = []
  const want = []
  for (const f of fns) {
    for (const off of [0, 4, f.size - 4].filter((o) => o >= 0 && o < f.size)) {
      addrs.push(BIAS + BigInt(f.rva + off))
      want.push(f.name)
    }
  }
  const mod = { path: binary, start: BIAS, end: BIAS + 0x100000n, bias: BIAS, buildId: '' }
  mod.buildId = platform === 'darwin' ? uuidOf(sym.id) : elfBuildId(binary)
  return { profile: profileOf(platform, [mod], addrs), want, sym }
}

function elfBuildId(file) {
  const r = spawnSync('readelf', ['-n', file], { encoding: 'utf8' })
  return /Build ID: ([0-9a-f]+)/.exec(r.stdout)[1]
}

function names(profile, options) {
  const s = ms.symbolicate(profile, options)
  return Array.from(s.frameFunction, (f) => s.functions.name[f])
}

const MACHO = ['zig-arm64', 'zig-x86_64', 'lld-arm64', 'lld-x86_64']

describe('Mach-O names are right or 0x… in <module>, never wrong', () => {
  for (const dir of MACHO) {
    const base = path.join(FIX, 'macho', dir)
    const lib = fs.readdirSync(path.join(base, 'full'))[0]
    const unknown = new RegExp(`^0x[0-9a-f]+ in ${lib.replace('.', '\\.')}$`)

    test(`${dir}: unstripped: every function named, no leading underscore`, () => {
      const { profile, want } = libraryProfile(path.join(FIX, 'macho', dir), path.join(base, 'full', lib))
      expect(names(profile, { symbolPath: [] })).toEqual(want)
    })

    test(`${dir}: stripped, no dSYM: exported functions named or unknown, static ones unknown`, () => {
      const { profile, want } = libraryProfile(path.join(FIX, 'macho', dir), path.join(base, 'stripped', lib))
      const got = names(profile, { symbolPath: [] })
      got.forEach((n, i) => {
        if (n !== want[i]) expect(n).toMatch(unknown)
      })
      expect(got.filter((n, i) => want[i].startsWith('local_') && n === want[i])).toEqual([])
      if (dir.startsWith('lld')) {
        // LC_FUNCTION_STARTS bounds every function: exports keep their names.
        expect(got.filter((n, i) => n === want[i]).length).toBe(want.filter((w) => !w.startsWith('local_')).length)
      }
    })

    test(`${dir}: stripped, dSYM on the symbol path: every function named`, () => {
      const { profile, want } = libraryProfile(path.join(FIX, 'macho', dir), path.join(base, 'stripped', lib))
      expect(names(profile, { symbolPath: path.join(base, 'dsym') })).toEqual(want)
    })

    test(`${dir}: stripped, dSYM beside the binary: every function named`, () => {
      const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ms-dsym-'))
      fs.copyFileSync(path.join(base, 'stripped', lib), path.join(tmp, lib))
      fs.cpSync(path.join(base, 'dsym'), tmp, { recursive: true })
      const { profile, want } = libraryProfile(path.join(FIX, 'macho', dir), path.join(tmp, lib))
      expect(names(profile, { symbolPath: [] })).toEqual(want)
      fs.rmSync(tmp, { recursive: true })
    })
  }

  test('a dSYM of another build (UUID) is not used', () => {
    const base = path.join(FIX, 'macho', 'lld-arm64')
    const { profile, want } = libraryProfile(base, path.join(base, 'stripped', 'libfl.dylib'))
    // The zig build's dSYM, renamed to this library's name.
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ms-dsym-'))
    fs.cpSync(path.join(FIX, 'macho', 'zig-arm64', 'dsym', 'libfx.dylib.dSYM'), path.join(tmp, 'libfl.dylib.dSYM'), { recursive: true })
    const got = names(profile, { symbolPath: tmp })
    expect(got.filter((n, i) => want[i].startsWith('local_') && n === want[i])).toEqual([])
    fs.rmSync(tmp, { recursive: true })
  })
})

/** A loopback symbol server over `root`, with switches for its failures. */
function symbolServer(root) {
  const state = { requests: [], mode: 'ok' }
  const server = http.createServer((req, res) => {
    state.requests.push(req.url)
    if (state.mode === 'hang') return // never answers
    if (state.mode === 'trickle') {
      // Answers, then a byte now and then, forever.
      res.writeHead(200)
      const t = setInterval(() => res.write('M'), 50)
      res.on('close', () => clearInterval(t))
      return
    }
    if (state.mode === 'html') {
      res.writeHead(200, { 'content-type': 'text/html' })
      return res.end('<html>maintenance</html>')
    }
    const rel = decodeURIComponent(new URL(req.url, 'http://x').pathname).replace(/^\/sym\//, '')
    const file = path.join(root, rel)
    if (!file.startsWith(root) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      res.writeHead(404)
      return res.end('not found')
    }
    res.writeHead(200)
    fs.createReadStream(file).pipe(res)
  })
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve({ server, state, url: `http://127.0.0.1:${server.address().port}/sym` })),
  )
}

describe('Breakpad symbol files from a server on 127.0.0.1', () => {
  let srv
  let root
  beforeAll(async () => {
    // The server's store: the fixtures' Breakpad files, in its layout.
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'ms-symsrv-'))
    for (const dir of [path.join(FIX, 'elf'), path.join(FIX, 'macho', 'lld-arm64')]) {
      fs.cpSync(path.join(dir, 'breakpad'), root, { recursive: true })
    }
    srv = await symbolServer(root)
  })
  afterAll(() => {
    srv.server.close()
    fs.rmSync(root, { recursive: true, force: true })
  })

  const cases = () => [
    ['ELF', libraryProfile(path.join(FIX, 'elf'), path.join(FIX, 'elf', 'stripped', 'libfe.so'), 'linux')],
    ['Mach-O', libraryProfile(path.join(FIX, 'macho', 'lld-arm64'), path.join(FIX, 'macho', 'lld-arm64', 'stripped', 'libfl.dylib'))],
  ]

  test('fetchSymbols downloads once, then symbolicate names the stripped binaries', async () => {
    const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ms-symcache-'))
    srv.state.mode = 'ok'
    for (const [kind, { profile, want }] of cases()) {
      const options = { symbolPath: srv.url, cacheDir }
      // Before: the static functions are unknown (nothing was downloaded).
      const before = names(profile, options)
      expect(before.filter((n, i) => want[i].startsWith('local_') && n === want[i])).toEqual([])
      const r = await ms.fetchSymbols(profile, options)
      expect([kind, r.downloaded, r.failed, r.messages]).toEqual([kind, 1, [], []])
      // In this process, where the module was loaded before the download:
      // the new file is noticed.
      expect(names(profile, options)).toEqual(want)
      // A new process (no module cache): symbolicate reads the cache only.
      const script = `const ms=require(${JSON.stringify(path.join(__dirname, '..'))});` +
        `const p=require('v8').deserialize(require('fs').readFileSync(0));` +
        `const s=ms.symbolicate(p,${JSON.stringify(options)});` +
        `console.log(JSON.stringify(Array.from(s.frameFunction,f=>s.functions.name[f])))`
      const child = spawnSync(process.execPath, ['-e', script], { input: require('v8').serialize(profile), encoding: 'utf8' })
      expect(child.stderr).toBe('')
      expect(JSON.parse(child.stdout)).toEqual(want)
      // Cached: not asked again.
      const again = await ms.fetchSymbols(profile, options)
      expect(again.requested).toBe(0)
    }
    fs.rmSync(cacheDir, { recursive: true })
  })

  test('404, an HTML page, a hung server and an unreachable one: names stay unknown, said once, nothing throws', async () => {
    const { profile, want } = cases()[0][1]
    const unknownLocals = (got) => got.filter((n, i) => want[i].startsWith('local_') && n === want[i]).length === 0

    // 404: the server does not have it; remembered, not asked again.
    const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ms-symcache-'))
    const missingUrl = `${srv.url}/nothing-here`
    let r = await ms.fetchSymbols(profile, { symbolPath: missingUrl, cacheDir })
    expect([r.missing, r.failed.length]).toEqual([1, 0])
    const asked = srv.state.requests.length
    r = await ms.fetchSymbols(profile, { symbolPath: missingUrl, cacheDir })
    expect([r.missing, srv.state.requests.length]).toEqual([1, asked])

    // A 200 that is not a symbol file is not kept.
    srv.state.mode = 'html'
    r = await ms.fetchSymbols(profile, { symbolPath: srv.url, cacheDir })
    expect(r.failed.map((f) => f.reason)).toEqual(['not a Breakpad symbol file'])
    expect(r.messages).toHaveLength(1)
    expect(unknownLocals(names(profile, { symbolPath: srv.url, cacheDir }))).toBe(true)

    // A server that never answers: the timeout, reported once.
    srv.state.mode = 'hang'
    const t0 = Date.now()
    r = await ms.fetchSymbols(profile, { symbolPath: srv.url, cacheDir, timeoutMs: 300 })
    expect(Date.now() - t0).toBeLessThan(10000)
    expect(r.unreachable).toHaveLength(1)
    expect(r.messages).toHaveLength(1)

    // A server that answers, then trickles: too slow, ended.
    srv.state.mode = 'trickle'
    const t1 = Date.now()
    try {
      r = await ms.fetchSymbols(profile, { symbolPath: srv.url, cacheDir, timeoutMs: 300 })
    } finally {
      srv.state.mode = 'ok'
    }
    expect(Date.now() - t1).toBeLessThan(10000)
    expect(r.failed.map((f) => f.reason)).toEqual([expect.stringMatching(/^too slow: \d+ bytes in 300 ms$/)])
    expect(fs.readdirSync(cacheDir, { recursive: true }).filter((f) => f.endsWith('.part'))).toEqual([])

    // Nothing listens there.
    const closed = http.createServer()
    await new Promise((res) => closed.listen(0, '127.0.0.1', res))
    const port = closed.address().port
    await new Promise((res) => closed.close(res))
    r = await ms.fetchSymbols(profile, { symbolPath: `http://127.0.0.1:${port}/sym`, cacheDir })
    expect(r.unreachable[0]).toMatch(/ECONNREFUSED/)
    expect(r.messages).toHaveLength(1)
    expect(unknownLocals(names(profile, { symbolPath: `http://127.0.0.1:${port}/sym`, cacheDir }))).toBe(true)

    // A corrupt file already in the cache: one warning (in a process of
    // its own, where process.emitWarning is Node's), unknown names.
    const options = { symbolPath: 'http://127.0.0.1:1/corrupt', cacheDir }
    const [d] = require('../lib/addon.js').symbolDownloads(profile, options)
    fs.mkdirSync(path.dirname(d.file), { recursive: true })
    fs.writeFileSync(d.file, 'garbage')
    const script =
      `const ms=require(${JSON.stringify(path.join(__dirname, '..'))});` +
      `const p=require('v8').deserialize(require('fs').readFileSync(0));const w=[];` +
      `process.on('warning',x=>w.push([x.code,x.message]));` +
      `let names;for(let i=0;i<3;i++){const s=ms.symbolicate(p,${JSON.stringify(options)});` +
      `names=Array.from(s.frameFunction,f=>s.functions.name[f])}` +
      `setImmediate(()=>console.log(JSON.stringify({names,w})))`
    const child = spawnSync(process.execPath, ['-e', script], { input: require('v8').serialize(profile), encoding: 'utf8' })
    const out = JSON.parse(child.stdout)
    expect(unknownLocals(out.names)).toBe(true)
    expect(out.w.map((x) => x[0])).toEqual(['MACHSAMPLER_SYMBOLS'])
    expect(out.w[0][1]).toMatch(/not a Breakpad symbol file/)
    fs.rmSync(cacheDir, { recursive: true })
  })

  test('the CLI: --symbol-path and MACHSAMPLER_SYMBOL_PATH name a stripped binary in report and convert', async () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ms-symcli-'))
    const { profile } = cases()[1][1]
    const file = path.join(tmp, 'p.machprof')
    ms.saveProfile(profile, file)
    const env = { ...process.env, XDG_CACHE_HOME: path.join(tmp, 'cache') }
    const run = (args, extraEnv = {}) =>
      new Promise((resolve) => {
        const c = spawn(process.execPath, [CLI, ...args], { env: { ...env, ...extraEnv } })
        let out = ''
        let err = ''
        c.stdout.on('data', (d) => (out += d))
        c.stderr.on('data', (d) => (err += d))
        c.on('exit', (code) => resolve({ code, out, err }))
      })
    // Without a symbol path, the static functions are unknown.
    let r = await run(['report', file, '--top', '50'])
    expect(r.code).toBe(0)
    expect(r.out).not.toMatch(/local_beta/)
    expect(r.out).toMatch(/0x[0-9a-f]+ in libfl\.dylib/)
    r = await run(['report', file, '--top', '50', '--symbol-path', srv.url])
    expect(r.code).toBe(0)
    expect(r.err).toMatch(/symbol servers: 1 downloaded/)
    expect(r.out).toMatch(/local_beta/)
    expect(r.out).not.toMatch(/0x[0-9a-f]+ in libfl\.dylib/)
    // From the cache now (fresh cache dir per env: use the same one).
    const out = path.join(tmp, 'p.collapsed')
    r = await run(['convert', file, '-o', out], { MACHSAMPLER_SYMBOL_PATH: srv.url })
    expect(r.code).toBe(0)
    expect(fs.readFileSync(out, 'utf8')).toMatch(/local_gamma/)
    // An unreachable server does not fail the command.
    r = await run(['report', file, '--symbol-path', 'http://127.0.0.1:1/none'])
    expect(r.code).toBe(0)
    expect(r.err).toMatch(/could not be reached/)
    // A bad entry is a usage error, found before the program runs.
    const marker = path.join(tmp, 'ran')
    r = await run(['record', '--symbol-path', 'ftp://x', '--', process.execPath, '-e', `require('fs').writeFileSync(${JSON.stringify(marker)}, '')`])
    expect([r.code, fs.existsSync(marker)]).toEqual([2, false])
    expect(r.err).toMatch(/--symbol-path: 'ftp:\/\/x' is neither a directory nor/)
    fs.rmSync(tmp, { recursive: true })
  })
})

describe('source maps', () => {
  const ts = path.join(FIX, 'sourcemap', 'src', 'fib.ts')
  const tsLine = (needle) => fs.readFileSync(ts, 'utf8').split('\n').findIndex((l) => l.includes(needle)) + 1

  const how = { dist: 'a .map file', inline: 'an inline map', memory: 'transpiled in memory as it loads, as ts-node does' }
  for (const which of ['dist', 'inline', 'memory']) {
    test(`compiled TypeScript (${how[which]}) is shown at its .ts lines`, () => {
      const r = spawnSync(process.execPath, [path.join(__dirname, 'fixtures', 'sourcemap-run.js'), which, '1500'], {
        encoding: 'utf8',
        timeout: 60000,
      })
      expect(r.status).toBe(0)
      const top = JSON.parse(r.stdout)
      const find = (name) => top.find((f) => f.name.startsWith(`${name} (`))
      for (const fn of ['fibonacci', 'sumOfSquares', 'run']) {
        const f = find(fn)
        expect(f).toBeDefined()
        expect([f.file, f.line]).toEqual([ts, tsLine(`function ${fn}(`)])
        expect(f.name).toMatch(new RegExp(`^${fn} \\(.*fib\\.ts:${tsLine(`function ${fn}(`)}:\\d+\\)$`))
      }
      // Nothing is left at the compiled .js position.
      expect(top.filter((f) => f.file.endsWith(`${which}/fib.js`))).toEqual([])
    })
  }

  // Every JavaScript function of a recorded profile named `fn (`, as
  // `file:line` and the name's location.
  const placesOf = (profile, fn) => {
    const fns = profile.symbols.functions
    const out = new Set()
    for (let f = 0; f < fns.name.length; f++) if (fns.name[f].startsWith(`${fn} (`)) out.add(`${fns.file[f]}:${fns.line[f]} ${fns.name[f].replace(/:\d+\)$/, ')')}`)
    return [...out]
  }
  const LOADER = path.join(FIX, 'sourcemap', 'loader')
  const appLine = (needle) => fs.readFileSync(path.join(LOADER, 'app.ts'), 'utf8').split('\n').findIndex((l) => l.includes(needle)) + 1

  test('machsampler record: TypeScript from an ESM load hook (as tsx runs it), at its .ts lines', () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-esmts-'))
    const out = path.join(tmp, 'esm.machprof')
    const app = path.join(LOADER, 'app.ts')
    const args = ['record', '-q', '-o', out, '--', process.execPath, '--import', path.join(LOADER, 'register.mjs'), app, '1200']
    const rec = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60000 })
    expect(rec.status).toBe(0)
    const p = ms.loadProfile(out)
    for (const fn of ['fibonacci', 'spin']) {
      const line = appLine(`function ${fn}(`)
      expect(placesOf(p, fn)).toEqual([`${app}:${line} ${fn} (${app}:${line})`])
    }
    fs.rmSync(tmp, { recursive: true, force: true })
  })

  test('machsampler record: a program that never returns to its event loop, ended by SIGTERM, keeps its .ts lines', async () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-esmts-'))
    const out = path.join(tmp, 'esm.machprof')
    const app = path.join(LOADER, 'app.ts')
    const args = ['record', '-q', '-o', out, '--', process.execPath, '--import', path.join(LOADER, 'register.mjs'), app, '60000', 'spinning']
    const rec = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    rec.stderr.on('data', (d) => (stderr += d))
    const ended = new Promise((resolve) => rec.on('exit', (code, signal) => resolve({ code, signal })))
    await new Promise((resolve, reject) => {
      rec.stdout.on('data', (d) => String(d).includes('spinning') && resolve())
      rec.on('exit', () => reject(new Error(`record ended first: ${stderr}`)))
    })
    // Some samples of the compiled functions, then the signal: JavaScript
    // listeners never run, so the native save writes the profile.
    await new Promise((resolve) => setTimeout(resolve, 700))
    rec.kill('SIGTERM')
    const { code } = await ended
    expect({ code, stderr }).toEqual({ code: 143, stderr: '' })
    const p = ms.loadProfile(out)
    for (const fn of ['fibonacci', 'spin']) {
      const line = appLine(`function ${fn}(`)
      expect(placesOf(p, fn)).toEqual([`${app}:${line} ${fn} (${app}:${line})`])
    }
    fs.rmSync(tmp, { recursive: true, force: true })
  }, 60000)

  test("machsampler record: evaluated code with an inline map (a bundler's eval-source-map build) at its original lines, inlined functions too", () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-evalmap-'))
    const out = path.join(tmp, 'eval.machprof')
    const rec = spawnSync(process.execPath, [CLI, 'record', '-q', '-o', out, '--', process.execPath, path.join(LOADER, 'eval.js'), '1200'], {
      encoding: 'utf8',
      timeout: 60000,
    })
    expect(rec.status).toBe(0)
    const p = ms.loadProfile(out)
    const url = 'webpack://app/./src/app.ts'
    for (const fn of ['fibonacci', 'spin']) {
      const line = appLine(`function ${fn}(`)
      expect(placesOf(p, fn)).toEqual([`${url}:${line} ${fn} (${url}:${line})`])
    }
    fs.rmSync(tmp, { recursive: true, force: true })
  })

  test('machsampler record: TypeScript transpiled in memory, in the main thread and a worker, at its .ts lines', () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-tsmem-'))
    const script = path.join(tmp, 'run-ts.js')
    // The worker compiles through vm, as test runners do; the main thread
    // through require, as ts-node does.
    fs.writeFileSync(
      script,
      `const ts = require(${JSON.stringify(require.resolve('typescript'))})
const fs = require('fs')
const { Worker, isMainThread } = require('worker_threads')
const compile = (filename) => ts.transpileModule(fs.readFileSync(filename, 'utf8'), {
  compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020, inlineSourceMap: true }, fileName: filename }).outputText
const file = ${JSON.stringify(ts)}
if (isMainThread) {
  require.extensions['.ts'] = (m, filename) => m._compile(compile(filename), filename)
  const w = new Worker(__filename)
  require(file).run(1200)
  w.on('exit', () => {})
} else {
  const exports = {}
  require('vm').runInThisContext('(function (exports, require, module) {' + compile(file) + '\\n})', { filename: file })(exports, require, {})
  exports.run(1200)
}
`,
    )
    const out = path.join(tmp, 'ts.machprof')
    const rec = spawnSync(process.execPath, [CLI, 'record', '-q', '-o', out, '--', process.execPath, script], { encoding: 'utf8', timeout: 60000 })
    expect(rec.status).toBe(0)
    const p = ms.loadProfile(out)
    const fns = p.symbols.functions
    for (const role of ['main', 'worker']) {
      const thread = p.threads.find((t) => (role === 'main' ? t.isMain : /^worker \d/.test(t.role)))
      expect(thread).toBeDefined()
      const named = new Set()
      for (let i = 0; i < p.samples.stack.length; i++) {
        if (p.threads[p.samples.thread[i]] !== thread) continue
        for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) named.add(p.symbols.frameFunction[p.stacks.frame[n]])
      }
      const fib = [...named].filter((f) => fns.name[f].startsWith('fibonacci ('))
      expect([...new Set(fib.map((f) => `${fns.file[f]}:${fns.line[f]}`))]).toEqual([`${ts}:${tsLine('function fibonacci(')}`])
    }
    fs.rmSync(tmp, { recursive: true, force: true })
  })
})

test.each([
  [{ cacheDir: 5 }, 'options.cacheDir must be a string, got number'],
  [{ cacheDir: ['/tmp'] }, 'options.cacheDir must be a string, got object'],
  [{ cacheDir: '' }, 'options.cacheDir must be a non-empty string'],
  [{ symbolPath: 5 }, 'options.symbolPath must be a string or an array of strings'],
  [{ symbolPath: ['/tmp', 3] }, 'options.symbolPath must be a string or an array of strings'],
])('symbol options %p are EINVAL naming what is valid', (options, message) => {
  const p = ms.loadProfile(path.join(__dirname, 'fixtures', 'format-v1.machprof'))
  expect(() => ms.symbolicate(p, options)).toThrow(expect.objectContaining({ code: 'EINVAL', message }))
})
