'use strict'
// Bad input to every CLI command (report, convert, record): missing
// files, directories, empty and garbage files, profiles truncated at many
// lengths, bit flips (compressed and not), unknown format versions and
// flags, crafted headers with a valid checksum (lengths that lie, columns
// missing or of the wrong type, indices out of range, weights of 0, a
// version 1 label on a version 2 payload and the reverse), a payload
// length of 2^63, and unwritable outputs. Each run must end within its
// time limit with a non-zero status and exactly one line on stderr
// ("machsampler: ...", no stack trace), and leave nothing in the output
// directory (an existing output file keeps its content). A file of a
// version newer than this machsampler writes (2) must say so and ask for
// an upgrade. The writer's version 2 and a version 1 file (no weight
// column: one sample a row) must both be read, samples counted by weight.

const fs = require('fs')
const path = require('path')
const zlib = require('zlib')
const { main, progress } = require('../lib/child')
const { ms } = require('../lib/sampler')
const { run, describe, tmpdir, ROOT } = require('../lib/proc')
const { rng, spin, weightSum } = require('../lib/check')

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
function build(header, columns, { version = 2, flags = 0, lengthDelta = 0n } = {}) {
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
  c.samples += weightSum(p)
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
  c.eq(rawBytes.readUInt32LE(8), 2, 'the format version saveProfile() writes')
  // Where each column starts in `columns`.
  const SIZE = { u32: 4, u64: 8, u8: 1, i32: 4 }
  const offsetOf = (hdr, name) => {
    let off = 0
    for (const x of hdr.columns) {
      if (x.name === name) return { off, len: x.len }
      off += x.len * SIZE[x.type]
    }
    throw new Error(`no column ${name}`)
  }
  const weights = offsetOf(header, 'samples.weight')
  /** The columns and header without samples.weight: a version 1 file's. */
  const withoutWeights = () => ({
    header: { ...header, columns: header.columns.filter((x) => x.name !== 'samples.weight') },
    columns: Buffer.concat([columns.subarray(0, weights.off), columns.subarray(weights.off + weights.len * 4)]),
  })
  const newer = new Set()
  for (const v of [0, 3, 9, 0xffffffff]) {
    if (v > 2) newer.add(`version-${v}`)
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
  {
    // Weights: 0 (a sample is at least one interval), and the version
    // label disagreeing with the column list.
    const zero = Buffer.from(columns)
    zero.fill(0, weights.off, weights.off + weights.len * 4)
    add('weights-zero', build(header, zero))
    const one = Buffer.from(columns)
    one.writeUInt32LE(0, weights.off + Math.floor(weights.len / 2) * 4)
    add('weight-zero-once', build(header, one))
    add('version-1-with-weights', build(header, columns, { version: 1 }))
    const v1 = withoutWeights()
    add('version-2-without-weights', build(v1.header, v1.columns))
    add('weight-column-wrong-type', build(h((x) => (x.columns[col('samples.weight')].type = 'u64')), columns))
  }
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
    const stack = offsetOf(header, 'samples.stack')
    for (let i = 0; i < stack.len; i++) cols.writeUInt32LE(0xffffffff, stack.off + i * 4)
    add('stack-index-out-of-range', build(header, cols))
    const cols2 = Buffer.from(columns)
    const parent = offsetOf(header, 'stacks.parent')
    for (let i = 0; i < parent.len; i++) cols2.writeInt32LE(i, parent.off + i * 4) // every node its own parent
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
    const r = await expectClean(['report', file], `report ${name}`)
    if (newer.has(name)) c.ok(/newer than this machsampler reads/.test(r.stderr) && /upgrade/.test(r.stderr), `report ${name}: says the file is newer and asks for an upgrade: ${r.stderr.trim()}`)
    await expectClean(['convert', file, '-o', path.join(outDir, 'x.pb.gz')], `convert ${name}`)
    await expectClean(['convert', file, '-o', existing], `convert ${name} over an existing file`)
  }
  // A good input always works (so the harness itself is sound).
  const ok1 = await run(node, [CLI, 'report', good], { timeoutMs: 30000, cwd: dir })
  c.ok(ok1.code === 0 && /functions by self samples/.test(ok1.stdout), `report of the good file: ${describe(ok1)}`)
  const ok2 = await run(node, [CLI, 'convert', raw, '-o', path.join(dir, 'ok.speedscope.json')], { timeoutMs: 30000, cwd: dir })
  c.ok(ok2.code === 0 && fs.existsSync(path.join(dir, 'ok.speedscope.json')), `convert of the good file: ${describe(ok2)}`)
  // Samples are counted by weight: the same rows with every weight
  // tripled report three times the samples; a version 1 file (no weight
  // column) counts one sample a row. The threads table is the count
  // (`--idle`, so every sample is in it); the header's "samples" line is
  // also compared.
  {
    const int = (x) => Number(x.replace(/,/g, ''))
    const reported = async (bytes, what) => {
      const f = path.join(dir, `${what}.machprof`)
      fs.writeFileSync(f, bytes)
      const r = await run(node, [CLI, 'report', '--idle', f], { timeoutMs: 30000, cwd: dir })
      const header = /^\s*samples\s+([\d,]+) \(([\d,]+) idle\)/m.exec(r.stdout)
      const table = r.stdout.split(/^Threads.*\n.*\n/m)[1] || ''
      let threads = 0
      let idle = 0
      // tid, running samples and their share, idle samples, thread.
      for (const m of table.matchAll(/^\s+\d+\s+([\d,]+)\s+[\d.]+%\s+([\d,]+)\s/gm)) {
        threads += int(m[1]) + int(m[2])
        idle += int(m[2])
      }
      c.ok(r.code === 0 && header && threads > 0, `report of a ${what} file: ${describe(r)}`)
      return { threads: [threads, idle], header: header ? [int(header[1]), int(header[2])] : null }
    }
    const rows = weights.len
    let total = 0
    for (let i = 0; i < rows; i++) total += columns.readUInt32LE(weights.off + i * 4)
    const tripled = Buffer.from(columns)
    for (let i = 0; i < rows; i++) tripled.writeUInt32LE(3 * columns.readUInt32LE(weights.off + i * 4), weights.off + i * 4)
    const v1 = withoutWeights()
    const asWritten = await reported(rawBytes, 'version-2')
    const times3 = await reported(build(header, tripled), 'weights-tripled')
    const old = await reported(build(v1.header, v1.columns, { version: 1 }), 'version-1')
    c.eq(asWritten.threads[0], total, 'report of the written file, threads table: samples (the sum of its weights)')
    c.eq(times3.threads, asWritten.threads.map((n) => 3 * n), 'report with every weight tripled, threads table: samples and idle samples')
    c.eq(old.threads[0], rows, 'report of a version 1 file, threads table: samples (one a row)')
    for (const [what, r] of [['written', asWritten], ['weights-tripled', times3], ['version-1', old]]) {
      c.knownOk('report-header-rows', r.header && r.header[0] === r.threads[0], () => `report of the ${what} file: the header says ${JSON.stringify(r.header)} samples (idle), the threads table ${JSON.stringify(r.threads)}`)
    }
    c.info.weights = { rows, samples: total }
  }

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
