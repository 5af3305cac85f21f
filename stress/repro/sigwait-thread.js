'use strict'
// Reproducer: an application thread that waits for signals with
// sigtimedwait received the sampling signal.
//
// A thread that blocks every signal and loops on sigtimedwait(full set)
// got one sampling signal per session: while it waits, the kernel shows
// its mask without the signals it waits for, so the mask check passed.
// Now a thread waiting in sigtimedwait/sigsuspend is never signalled, and
// masks are checked again for every thread.
//
//   node stress/repro/sigwait-thread.js   exit 1 if reproduced

const { verdict, addonScript, withNativeThreads } = require('./lib')

const problems = []
const seen = []
for (const mode of ['cpu', 'wall']) {
  const PROGRAM = addonScript(`for (let i = 0; i < 5; i++) {
  ms.start({ intervalMs: 1, mode: '${mode}' })
  const end = Date.now() + 300; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)
  ms.stop()
}`)
  const r = withNativeThreads('sigwait', process.execPath, ['-e', PROGRAM], { timeout: 60000 })
  if (r.status !== 0) problems.push(`${mode}: status ${r.status} ${r.stderr.slice(-200)}`)
  const taken = r.report.sigwait_taken
  seen.push(`${mode}: ${taken} signals taken in 5 sessions`)
  if (taken !== 0) problems.push(`${mode}: the sigwait thread took ${taken} signals (${JSON.stringify(r.report)})`)
}
verdict(problems.length > 0, problems.length ? problems.join('; ') : seen.join('; '))
