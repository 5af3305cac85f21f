'use strict'
// `--sanitizers`: the addon under valgrind memcheck, in Node.
// 1. Leaks across start/stop: the same program with 10 and with 1000
//    start/stop cycles at 1 kHz (a worker busy), alternating CPU and wall
//    mode (each has its own timers and buffers), each profile converted to
//    JS; at the end one profile is symbolicated, exported and reported, in
//    both runs alike (symbolicate() keeps module symbol tables cached for
//    the life of the process, tens of MB for node itself: by design, and
//    the same in both runs). Leak records whose allocation stack is in the
//    addon are compared: a per-cycle leak shows up as growth.
// 2. One stress scenario (the allocation storm, shortened) under
//    memcheck: no invalid read/write, no use of uninitialised memory, no
//    bad free in the addon's code, and the scenario's own checks pass.
// Node itself leaks on purpose at exit; only records that involve the
// addon (machsampler*.node) count.

const fs = require('fs')
const path = require('path')
const { spawnSync } = require('child_process')
const { main, progress, PREFIX } = require('../lib/child')

const RESULTS = path.join(__dirname, '..', 'results')
const { run, describe, tmpdir, ROOT, ADDON } = require('../lib/proc')

const CYCLES_PROGRAM = `
const ms = require(${JSON.stringify(ADDON)})
const { Worker } = require('worker_threads')
const w = new Worker('let x = 0; for (;;) x += Math.sqrt(x + 1)', { eval: true })
const n = Number(process.argv[2])
let samples = 0
const spin = (t) => { const e = Date.now() + t; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1) }
let last
for (let i = 0; i < n; i++) {
  ms.start({ intervalMs: 1, mode: i % 2 ? 'wall' : 'cpu' })
  spin(5)
  last = ms.stop()
  samples += last.stats.samplesCaptured
}
last.symbols = ms.symbolicate(last)
ms.exportProfile(last, 'pprof')
ms.profileReport(last, {})
w.terminate().then(() => console.log(JSON.stringify({ cycles: n, samples })))
`

/** Leak and error records of a valgrind log that involve the addon. */
function addonRecords(log) {
  const pidPrefix = /^==\d+== ?/
  const blocks = []
  let cur = []
  for (const raw of log.split('\n')) {
    if (!pidPrefix.test(raw)) continue
    const line = raw.replace(pidPrefix, '')
    if (line.trim() === '') {
      if (cur.length) blocks.push(cur)
      cur = []
    } else cur.push(line)
  }
  if (cur.length) blocks.push(cur)
  const mine = (b) => b.some((l) => /machsampler[^\s]*\.node|machsampler::/.test(l))
  const leaks = []
  const errors = []
  for (const b of blocks) {
    if (!mine(b)) continue
    const head = b[0]
    const m = /([\d,]+) (?:\(([\d,]+) direct, ([\d,]+) indirect\) )?bytes in ([\d,]+) blocks are (definitely|indirectly|possibly) lost/.exec(head)
    if (m) leaks.push({ bytes: Number(m[1].replace(/,/g, '')), kind: m[5], blocks: Number(m[4].replace(/,/g, '')), stack: b.slice(1, 12).join('\n') })
    else if (/^(Invalid|Conditional jump|Use of uninitialised|Syscall param|Mismatched free|Source and destination overlap|Argument .* of function)/.test(head)) errors.push(b.slice(0, 14).join('\n'))
  }
  const summary = (re) => Number(((re.exec(log) || [])[1] || '0').replace(/,/g, ''))
  return {
    leaks,
    errors,
    definitelyLostAll: summary(/definitely lost: ([\d,]+) bytes/),
    errorSummary: summary(/ERROR SUMMARY: ([\d,]+) errors/),
    suppressed: summary(/ERROR SUMMARY: [\d,]+ errors from [\d,]+ contexts \(suppressed: ([\d,]+)/),
  }
}

// stress/valgrind.supp says which reports are expected, and why.
const VALGRIND = ['--tool=memcheck', `--suppressions=${path.join(ROOT, 'stress', 'valgrind.supp')}`, '--leak-check=full', '--show-leak-kinds=definite,indirect,possible', '--num-callers=40', '--error-limit=no', '--fair-sched=try']

main(async (o, c) => {
  const node = o.node || process.execPath
  const ok = spawnSync('valgrind', ['--version'], { encoding: 'utf8' })
  if (!c.ok(ok.status === 0, 'valgrind is not installed (apt-get install valgrind)')) return
  const dir = tmpdir('valgrind')
  const prog = path.join(dir, 'cycles.js')
  fs.writeFileSync(prog, CYCLES_PROGRAM)
  c.info.valgrind = ok.stdout.trim()
  c.info.logs = 'stress/results/valgrind-*.log'

  const runs = {}
  for (const n of [10, o.cycles ?? 1000]) {
    const log = path.join(RESULTS, `valgrind-cycles-${n}.log`)
    const r = await run('valgrind', [...VALGRIND, `--log-file=${log}`, node, prog, String(n)], { cwd: dir, timeoutMs: 1800000, note: `valgrind: ${n} cycles` })
    let out = null
    try {
      out = JSON.parse(r.stdout.trim().split('\n').pop())
    } catch {}
    c.ok(r.code === 0 && out && out.cycles === n, `valgrind, ${n} cycles: ${describe(r)}`)
    if (out) c.samples += out.samples
    const rec = addonRecords(fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '')
    runs[n] = { ms: r.ms, samples: out && out.samples, ...rec }
    progress(`valgrind ${n} cycles`)
  }
  const [small, big] = Object.keys(runs).map(Number).sort((a, b) => a - b)
  const lost = (r, kind) => r.leaks.filter((l) => l.kind === kind).reduce((a, l) => a + l.bytes, 0)
  for (const n of [small, big]) {
    c.eq(runs[n].errors.length, 0, `valgrind, ${n} cycles: memory errors in the addon:\n${runs[n].errors.slice(0, 3).join('\n---\n')}`)
    c.eq(lost(runs[n], 'definitely'), 0, `valgrind, ${n} cycles: bytes definitely lost from the addon's allocations:\n${runs[n].leaks.filter((l) => l.kind === 'definitely').slice(0, 3).map((l) => l.stack).join('\n---\n')}`)
    c.eq(lost(runs[n], 'indirectly'), 0, `valgrind, ${n} cycles: bytes indirectly lost from the addon's allocations`)
  }
  const growth = lost(runs[big], 'possibly') - lost(runs[small], 'possibly')
  c.ok(growth < 64 * 1024, `valgrind: "possibly lost" from the addon grew by ${growth} bytes from ${small} to ${big} cycles`)
  c.info.cycles = Object.fromEntries(
    Object.entries(runs).map(([n, r]) => [
      n,
      {
        seconds: +(r.ms / 1000).toFixed(0),
        samples: r.samples,
        addonErrors: r.errors.length,
        addonDefinitelyLost: lost(r, 'definitely'),
        addonIndirectlyLost: lost(r, 'indirectly'),
        addonPossiblyLost: lost(r, 'possibly'),
        processDefinitelyLost: r.definitelyLostAll,
        processErrors: r.errorSummary,
      },
    ]),
  )

  // The allocation storm, shortened, under memcheck.
  const log = path.join(RESULTS, 'valgrind-alloc-storm.log')
  const storm = path.join(ROOT, 'stress', 'scenarios', 'alloc-storm.js')
  const r = await run('valgrind', [...VALGRIND, '--leak-check=no', `--log-file=${log}`, node, storm, JSON.stringify({ seconds: o.stormSeconds ?? 4, threads: 3, churnMs: 1000, checkBusy: false })], {
    cwd: ROOT,
    env: { MACHSAMPLER_ALLOC_CHECK: '1' },
    timeoutMs: 1800000,
    note: 'valgrind: alloc-storm',
  })
  const line = r.stdout.split('\n').find((l) => l.startsWith(PREFIX) && l.includes('"type":"result"'))
  const res = line ? JSON.parse(line.slice(PREFIX.length)) : null
  c.ok(r.code === 0 && res, `alloc-storm under valgrind: ${describe(r)}`)
  if (res) {
    c.samples += res.samples
    c.eq(res.wrongCount, 0, `alloc-storm under valgrind: wrong results ${JSON.stringify(res.wrong)}`)
  }
  const rec = addonRecords(fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '')
  c.eq(rec.errors.length, 0, `alloc-storm under valgrind: memory errors in the addon:\n${rec.errors.slice(0, 3).join('\n---\n')}`)
  c.info.storm = { seconds: +(r.ms / 1000).toFixed(0), samples: res && res.samples, addonErrors: rec.errors.length, processErrors: rec.errorSummary, suppressedByValgrindSupp: rec.suppressed }
  fs.rmSync(dir, { recursive: true, force: true })
})
