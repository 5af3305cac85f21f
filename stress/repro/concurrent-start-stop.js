'use strict'
// Reproducer: a stop() on one JS thread racing a start() on another.
//
// control::stop() takes the running sampler out of its slot and releases
// the lock *before* joining the sampler thread. A start() from another JS
// thread (a worker; "any environment may start it and any may stop it")
// then starts a second sampler while the first one is still finishing.
// Both share `Shared` (stats, thread registry) and the signal-slot table:
// the new session's start() resets the stats the finishing session is
// about to snapshot, and LinuxBackend::new() reclaims slots the finishing
// session still harvests. Visible result: profiles whose
// stats.samplesCaptured is not their number of samples (the sum of their
// weights) (and threadsSampled != samplesCaptured + samplesDropped).
//
//   node stress/repro/concurrent-start-stop.js      exit 1 and a count if reproduced
//
// Expected: 0 inconsistent profiles. Seen: dozens per second.

const { Worker, isMainThread, parentPort, workerData } = require('worker_threads')
const path = require('path')
const ms = require(path.join(__dirname, '..', '..'))
const { checkStats } = require(path.join(__dirname, '..', 'lib', 'check.js'))

function loop(seconds, tag) {
  const end = Date.now() + seconds * 1000
  const out = { sessions: 0, inconsistent: 0, example: null, eagain: 0, esrch: 0 }
  while (Date.now() < end) {
    try {
      ms.start({ intervalMs: 1 })
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e
      out.eagain++
    }
    const until = Date.now() + 2
    while (Date.now() < until);
    let p
    try {
      p = ms.stop()
    } catch (e) {
      if (e.code !== 'ESRCH') throw e
      out.esrch++
      continue
    }
    out.sessions++
    // Samples counted by weight (a CPU-mode row can stand for several).
    const bad = checkStats(p)
    if (bad !== 'ok') {
      out.inconsistent++
      out.example ||= `${tag}: ${bad}`
    }
  }
  return out
}

if (isMainThread) {
  const seconds = Number(process.argv[2] || 3)
  const w = new Worker(__filename, { workerData: { seconds } })
  const theirs = new Promise((r) => w.once('message', r))
  const mine = loop(seconds, 'main')
  theirs.then((t) => {
    const total = mine.inconsistent + t.inconsistent
    console.log(JSON.stringify({ main: mine, worker: t }, null, 1))
    // The verdict line the repros scenario reads: "REPRODUCED: ..." or "not reproduced: ...".
    console.log(`${total ? 'REPRODUCED' : 'not reproduced'}: ${total} inconsistent profiles of ${mine.sessions + t.sessions}`)
    process.exit(total ? 1 : 0)
  })
} else {
  parentPort.postMessage(loop(workerData.seconds, 'worker'))
}
