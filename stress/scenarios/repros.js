'use strict'
// The reproducers of stress/repro/, each a bug this sampler once had (a
// program killed by execve, a crash on a foreign stack, EINTR in native
// code, a hang on a sigwait thread, ...). Each prints "REPRODUCED: ..." or
// "not reproduced: ..." and exits 1 when it reproduces. A verdict line is
// required: a reproducer that dies or prints nothing is a wrong result
// too, so a broken reproducer cannot pass silently.

const path = require('path')
const { main } = require('../lib/child')
const { run, describe } = require('../lib/proc')

const REPRO = path.join(__dirname, '..', 'repro')

// [script, quick args, full args, time limit in seconds]
const REPROS = [
  ['execve-pending-signal.js', ['10'], ['100'], 300],
  ['foreign-stacks.js', ['5'], ['25'], 300],
  ['eintr-native-threads.js', [], [], 120],
  ['sigwait-thread.js', [], [], 120],
  ['idle-crowding.js', [], [], 120],
  ['symlinked-output.js', [], [], 120],
  ['record-group-signal.js', [], [], 120],
  ['record-duration-busy.js', [], [], 120],
  ['signal-taken-over.js', [], [], 120],
  ['scale-start.js', ['2000'], ['9000'], 300],
  ['concurrent-start-stop.js', ['2'], ['10'], 120],
  ['symbolicate-fifo-module.js', [], [], 60],
  ['small-stack.js', [], [], 300],
  ['signal-after-stop.js', ['50'], ['200'], 300],
  ['starved-cpu-timers.js', ['12'], ['40'], 180],
]

main(async (o, c) => {
  const only = o.only ? new Set(o.only) : null
  for (const [script, quick, full, limitS] of REPROS) {
    if (only && !only.has(script)) continue
    const r = await run(process.execPath, [path.join(REPRO, script), ...(o.full ? full : quick)], {
      timeoutMs: limitS * 1000,
      note: script,
    })
    const line = r.stdout.split('\n').find((l) => /^(REPRODUCED|not reproduced): /.test(l))
    c.info[script] = line || describe(r)
    c.ok(!r.timedOut, `${script}: timed out after ${limitS} s (${describe(r)})`)
    c.ok(line !== undefined, `${script}: no verdict line (${describe(r)})`)
    c.ok(r.code === 0 && line && line.startsWith('not reproduced'), `${script}: ${line || describe(r)}`)
  }
})
