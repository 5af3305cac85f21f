'use strict'
// Bad input to every CLI command (report, convert, record): missing
// files, directories, empty and garbage files, profiles truncated at many
// lengths, bit flips (compressed and not), unknown format versions and
// flags, crafted headers with a valid checksum (lengths that lie, columns
// missing or of the wrong type, indices out of range), a payload length
// of 2^63, and unwritable outputs. Each run must end within its time
// limit with a non-zero status and exactly one line on stderr
// ("machsampler: ...", no stack trace), and leave nothing in the output
// directory (an existing output file keeps its content).

const fs = require('fs')
const path = require('path')
const zlib = require('zlib')
const { main, progress } = require('../lib/child')
const { ms } = require('../lib/sampler')
const { run, describe, tmpdir, ROOT } = require('../lib/proc')
const { rng, spin } = require('../lib/check')

const CLI = path.join(ROOT, 'bin', 'machsampler.js')

const CRC_TABLE = (() => {
  const t = new Uint32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    t[n] = c >>> 0
  }
  return t
})()

function crc32(buf) {
  let c = 0xffffffff
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}

/** Splits an uncompressed .machprof into its JSON header and columns. */
function parse(file) {
  const payload = file.subarray(28)
  const h = payload.readUInt32LE(0)
  return { header: JSON.parse(payload.subarray(4, 4 + h).toString('utf8')), columns: payload.subarray(4 + h) }
}

/** Builds an uncompressed .machprof with a valid checksum around anything. */
function build(header, columns, { version = 1, flags = 0, lengthDelta = 0n } = {}) {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header))
  const payload = Buffer.concat([Buffer.alloc(4), json, columns])
  payload.writeUInt32LE(json.length, 0)
  const pre = Buffer.alloc(28)
  pre.write('MACHPROF', 0, 'latin1')
  pre.writeUInt32LE(version, 8)
  pre.writeUInt32LE(flags, 12)
  pre.writeBigUInt64LE(BigInt(payload.length) + lengthDelta, 16)
  pre.writeUInt32LE(crc32(payload), 24)
  return Buffer.concat([pre, payload])
}

main(async (o, c) => {
  const node = o.node || process.execPath
  const random = rng(o.seed ?? 5)
  const dir = tmpdir('badcli')
  const inputs = path.join(dir, 'in')
  const outDir = path.join(dir, 'out')
  fs.mkdirSync(inputs)
  fs.mkdirSync(outDir)

  // A real profile, compressed and not.
  ms.start({ intervalMs: 1 })
  spin(400)
  const p = ms.stop()
  c.samples += p.samples.thread.length
  p.symbols = ms.symbolicate(p)
  const good = path.join(inputs, 'good.machprof')
  const raw = path.join(inputs, 'raw.machprof')
  ms.saveProfile(p, good)
  ms.saveProfile(p, raw, { format: 'machprof', compress: false })
  const goodBytes = fs.readFileSync(good)
  const rawBytes = fs.readFileSync(raw)
  const { header, columns } = parse(rawBytes)
  c.ok(build(header, columns).equals(rawBytes), 'the test writer reproduces a real file byte for byte')

  const cases = []
  const add = (name, bytes) => {
    const f = path.join(inputs, `${name}.machprof`)
    if (bytes !== null) fs.writeFileSync(f, bytes)
    cases.push([name, f])
  }
  add('missing', null)
  cases.push(['a directory', inputs])
  cases.push(['/dev/null', '/dev/null'])
  add('empty', Buffer.alloc(0))
  add('text', 'this is not a profile\n')
  add('random', Buffer.from(Array.from({ length: 4096 }, () => Math.floor(random() * 256))))
  add('magic-only', Buffer.from('MACHPROF'))
  add('magic-then-garbage', Buffer.concat([Buffer.from('MACHPROF'), Buffer.alloc(100, 0xab)]))
  add('gzip-of-garbage', Buffer.concat([goodBytes.subarray(0, 28), zlib.gzipSync(Buffer.alloc(1000, 7))]))
  for (const v of [0, 2, 9, 0xffffffff]) {
    const b = Buffer.from(rawBytes)
    b.writeUInt32LE(v, 8)
    add(`version-${v}`, b)
  }
  for (const f of [2, 0x80000000, 0xffffffff]) {
    const b = Buffer.from(rawBytes)
    b.writeUInt32LE(f, 12)
    add(`flags-${f}`, b)
  }
  add('payload-length-2^63', build(header, columns, { lengthDelta: 2n ** 63n - BigInt(columns.length) }))
  add('payload-length-short', build(header, columns, { lengthDelta: -1n }))
  {
    const b = Buffer.from(goodBytes)
    b.writeBigUInt64LE(2n ** 40n, 16) // a gzip payload that claims a terabyte
    add('gzip-claims-1TB', b)
  }
  // Crafted headers with a valid checksum.
  const h = (f) => {
    const copy = JSON.parse(JSON.stringify(header))
    f(copy)
    return copy
  }
  const col = (name) => header.columns.findIndex((x) => x.name === name)
  add('header-not-json', build('{"meta": ', columns))
  add('header-empty-object', build({}, columns))
  add('header-huge-length', (() => {
    const b = build(header, columns)
    b.writeUInt32LE(0xfffffff0, 28)
    return b
  })())
  add('column-len-lies', build(h((x) => (x.columns[0].len += 1)), columns))
  add('column-len-2^40', build(h((x) => (x.columns[col('stacks.frame')].len = 2 ** 40)), columns))
  add('column-missing', build(h((x) => x.columns.pop()), columns))
  add('column-wrong-type', build(h((x) => (x.columns[0].type = 'f64')), columns))
  add('column-renamed', build(h((x) => (x.columns[1].name = 'samples.evil')), columns))
  add('threads-empty', build(h((x) => (x.threads = [])), columns))
  add('threads-not-array', build(h((x) => (x.threads = 'nope')), columns))
  add('modules-garbage', build(h((x) => (x.modules = [{ path: 7, start: -1 }])), columns))
  add('times-negative', build(h((x) => (x.startNs = -5)), columns))
  add('functions-empty', build(h((x) => (x.functions = [])), columns))
  add('meta-missing', build(h((x) => delete x.meta), columns))
  {
    // Indices out of range with a valid checksum: every sample's stack index
    // set to 0xffffffff.
    const cols = Buffer.from(columns)
    const n = header.columns[0].len
    const stackOff = n * 4 + n * 8
    for (let i = 0; i < n; i++) cols.writeUInt32LE(0xffffffff, stackOff + i * 4)
    add('stack-index-out-of-range', build(header, cols))
    const cols2 = Buffer.from(columns)
    const parentCol = col('stacks.parent')
    let off = 0
    for (let i = 0; i < parentCol; i++) off += header.columns[i].len * { u32: 4, u64: 8, u8: 1, i32: 4 }[header.columns[i].type]
    for (let i = 0; i < header.columns[parentCol].len; i++) cols2.writeInt32LE(i, off + i * 4) // every node its own parent
    add('stack-parent-cycle', build(header, cols2))
  }
  // Truncations and bit flips.
  const cuts = o.cuts ?? 12
  for (let i = 0; i < cuts; i++) {
    const at = Math.floor(((i + 0.5) / cuts) * rawBytes.length)
    add(`raw-cut-${at}`, rawBytes.subarray(0, at))
    const at2 = Math.floor(((i + 0.5) / cuts) * goodBytes.length)
    add(`gz-cut-${at2}`, goodBytes.subarray(0, at2))
  }
  // A flip that changes nothing the reader uses (the padding bits after
  // deflate's last block: the inflated payload and its checksum are intact)
  // is not corruption, and the file is rightly accepted; such flips are
  // counted and replaced, so every case kept must be rejected.
  const flips = o.flips ?? 20
  const probe = path.join(dir, 'flip-probe.machprof')
  c.info.harmlessFlips = []
  for (let i = 0, tries = 0; i < flips && tries < flips * 10; tries++) {
    const src = i % 2 ? goodBytes : rawBytes
    const b = Buffer.from(src)
    const pos = 8 + Math.floor(random() * (b.length - 8))
    b[pos] ^= 1 << Math.floor(random() * 8)
    const name = `${i % 2 ? 'gz' : 'raw'}-flip-${pos}`
    fs.writeFileSync(probe, b)
    let intact = false
    try {
      ms.loadProfile(probe)
      intact = true
    } catch {}
    if (intact) {
      c.info.harmlessFlips.push(name)
      continue
    }
    add(name, b)
    i++
  }

  // Every case through report and convert.
  const existing = path.join(outDir, 'existing.html')
  fs.writeFileSync(existing, 'keep me')
  let runs = 0
  const outcomes = {}
  async function expectClean(args, what, { status = null } = {}) {
    const before = fs.readdirSync(outDir).sort()
    const r = await run(node, [CLI, ...args], { timeoutMs: 30000, note: what, cwd: dir })
    runs++
    const lines = r.stderr.trimEnd().split('\n').filter(Boolean)
    const ok =
      !r.timedOut &&
      r.signal === null &&
      (status === null ? r.code !== 0 : r.code === status) &&
      lines.length === 1 &&
      lines[0].startsWith('machsampler: ') &&
      !/\n\s+at /.test(r.stderr) &&
      !/internal error/.test(r.stderr)
    if (r.timedOut) c.hang(`${what}: still running after 30 s`)
    c.ok(ok, `${what}: ${describe(r)}`)
    const after = fs.readdirSync(outDir).sort()
    c.eq(after, before, `${what}: files in the output directory`)
    c.eq(fs.readFileSync(existing, 'utf8'), 'keep me', `${what}: an existing output file was changed`)
    const key = r.timedOut ? 'hang' : `${r.code}`
    outcomes[key] = (outcomes[key] || 0) + 1
    progress(what)
    return r
  }
  for (const [name, file] of cases) {
    await expectClean(['report', file], `report ${name}`)
    await expectClean(['convert', file, '-o', path.join(outDir, 'x.pb.gz')], `convert ${name}`)
    await expectClean(['convert', file, '-o', existing], `convert ${name} over an existing file`)
  }
  // A good input always works (so the harness itself is sound).
  const ok1 = await run(node, [CLI, 'report', good], { timeoutMs: 30000, cwd: dir })
  c.ok(ok1.code === 0 && /functions by self samples/.test(ok1.stdout), `report of the good file: ${describe(ok1)}`)
  const ok2 = await run(node, [CLI, 'convert', raw, '-o', path.join(dir, 'ok.speedscope.json')], { timeoutMs: 30000, cwd: dir })
  c.ok(ok2.code === 0 && fs.existsSync(path.join(dir, 'ok.speedscope.json')), `convert of the good file: ${describe(ok2)}`)

  // Unwritable outputs.
  fs.writeFileSync(path.join(dir, 'a-file'), '')
  const unwritable = [
    ['a missing directory', path.join(dir, 'missing', 'x.html')],
    ['under a regular file', path.join(dir, 'a-file', 'x.html')],
    ['an existing directory', outDir, ['-f', 'html']],
    ['/proc', '/proc/machsampler-stress.html'],
    ['/sys', '/sys/machsampler-stress.html'],
    ['an empty name', ''],
    ['an unknown extension', path.join(outDir, 'x.docx')],
  ]
  for (const [what, out, extra = []] of unwritable) {
    await expectClean(['convert', good, '-o', out, ...extra], `convert to ${what}`)
    // `record -o ''` means "no -o" to the CLI as it stands (a default
    // name in the current directory): noted, not counted.
    if (out !== '') await expectClean(['record', '-o', out, ...extra, '--', node, '-e', 'console.log("ran")'], `record to ${what}`)
  }
  {
    const cwd = fs.mkdtempSync(path.join(dir, 'empty-o-'))
    const r = await run(node, [CLI, 'record', '-q', '-o', '', '--', node, '-e', '0'], { timeoutMs: 30000, cwd })
    c.info.recordWithEmptyOutputName = `exit ${r.code}, wrote ${JSON.stringify(fs.readdirSync(cwd))}`
  }
  // The output directory disappears while the program runs.
  const vanishing = path.join(dir, 'vanishing')
  fs.mkdirSync(vanishing)
  const r = await run(node, [CLI, 'record', '-q', '--interval', '1', '-o', path.join(vanishing, 'p.machprof'), '--', node, '-e', `require('fs').rmSync(${JSON.stringify(vanishing)}, { recursive: true }); const e = Date.now() + 300; while (Date.now() < e);`], {
    timeoutMs: 30000,
    cwd: dir,
  })
  const lines = r.stderr.trimEnd().split('\n').filter(Boolean)
  c.ok(r.code === 1 && lines.length === 1 && /^machsampler: .*cannot write/.test(lines[0]) && !fs.existsSync(vanishing), `record whose output directory vanished: ${describe(r)}`)
  c.info.cliRuns = runs + 3
  c.info.inputs = cases.length
  c.info.exitStatuses = outcomes
  fs.rmSync(dir, { recursive: true, force: true })
})
