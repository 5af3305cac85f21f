'use strict'
// Signals and syscalls at 1 kHz, in CPU mode (threads are interrupted only
// by their own CPU timers, so only while they run) and in wall mode (the
// sampler thread signals every thread that ran since its last sample,
// wherever it is: threads sitting in blocking system calls are
// interrupted, and must not notice). In each mode:
// - fs.readSync on a FIFO with a slow writer, and fs.writeSync of 4 MB
//   into a FIFO whose reader is slow (partial writes must be finished);
// - a TCP and a Unix-socket echo, byte-exact;
// - Atomics.wait with a timeout (must not return early) and with a notify;
// - child_process.execSync / spawnSync (output and timing) and `sleep`;
// - fs, zlib, crypto and dns work on the libuv pool.
// Every operation must complete with the right result, and no EINTR (or
// any other error) may reach JS. Meanwhile the process sends itself
// SIGUSR2, SIGHUP, SIGINT, SIGTERM and SIGWINCH: each handler must run
// exactly once per signal. Child processes must see the same signal mask
// and ignored set as without the sampler. In grandchildren: SIGUSR1 starts
// Node's inspector while sampling (and a SIGUSR1 listener still runs),
// and SIGTERM/SIGINT without a handler still kill the process.

const fs = require('fs')
const net = require('net')
const os = require('os')
const path = require('path')
const { execSync, execFileSync } = require('child_process')
const { Worker } = require('worker_threads')
const { main, progress } = require('../lib/child')
const { Sampling } = require('../lib/sampler')
const { runNode, describe, tmpdir, ADDON } = require('../lib/proc')
const { delay } = require('../lib/check')
const { cpuProblems } = require('../lib/cpu')

// Each worker runs one activity `rounds` times and posts
// { ok, bad: [messages], ops }.
const WORKER = `
const { parentPort, workerData: d } = require('worker_threads')
const fs = require('fs')
const cp = require('child_process')
const bad = []
let ops = 0
const fail = (m) => { if (bad.length < 20) bad.push(m) }
const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
const beat = () => parentPort.postMessage({ beat: ++ops })
// CPU work between blocking calls keeps the thread "active" for the idle
// rule, so the sampler keeps signalling it and signals land inside the
// blocking calls (a thread that only blocks is not signalled at all).
const spin = (ms) => { const e = process.hrtime.bigint() + BigInt(Math.round(ms * 1e6)); let x = 0; while (process.hrtime.bigint() < e) x += Math.sqrt(x + 1); return x }
parentPort.postMessage({ tid: Number(fs.readlinkSync('/proc/thread-self').split('/').pop()) })
function pattern(n, seed) { const b = Buffer.allocUnsafe(n); for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 255; return b }
const acts = {
  // Reads a FIFO whose writer is slow: readSync blocks in read(2).
  fifoRead() {
    for (let r = 0; r < d.rounds; r++) {
      const fd = fs.openSync(d.fifo + r, 'r')
      const want = pattern(d.bytes, r)
      const got = Buffer.alloc(d.bytes)
      let off = 0
      while (off < d.bytes) {
        const n = fs.readSync(fd, got, off, Math.min(65536, d.bytes - off), null)
        if (n === 0) break
        off += n
        spin(0.5)
        beat()
      }
      fs.closeSync(fd)
      if (off !== d.bytes || !got.equals(want)) fail('fifo read: got ' + off + ' bytes, content ' + (got.equals(want) ? 'ok' : 'wrong'))
    }
  },
  // The slow writer: small chunks with pauses.
  fifoSlowWrite() {
    for (let r = 0; r < d.rounds; r++) {
      const fd = fs.openSync(d.fifo + r, 'w')
      const data = pattern(d.bytes, r)
      for (let off = 0; off < data.length; off += 8192) {
        const n = fs.writeSync(fd, data, off, Math.min(8192, data.length - off))
        if (n !== Math.min(8192, data.length - off)) fail('fifo slow write: wrote ' + n)
        if ((off / 8192) % 16 === 0) sleep(5)
        else spin(0.7)
        beat()
      }
      fs.closeSync(fd)
    }
  },
  // One writeSync of 4 MB into a FIFO with a slow reader: the kernel
  // takes it in pipe-sized pieces, and a signal between two pieces makes
  // write(2) return short; writeSync must still write it all.
  fifoBigWrite() {
    for (let r = 0; r < d.rounds; r++) {
      const fd = fs.openSync(d.fifo + 'big' + r, 'w')
      const data = pattern(4 << 20, r)
      const n = fs.writeSync(fd, data)
      if (n !== data.length) fail('fifo big write: writeSync returned ' + n + ' of ' + data.length)
      fs.closeSync(fd)
      beat()
    }
  },
  fifoSlowRead() {
    for (let r = 0; r < d.rounds; r++) {
      const fd = fs.openSync(d.fifo + 'big' + r, 'r')
      const want = pattern(4 << 20, r)
      const got = Buffer.alloc(want.length)
      let off = 0
      while (off < got.length) {
        const n = fs.readSync(fd, got, off, Math.min(16384, got.length - off), null)
        if (n === 0) break
        off += n
        if (off % (256 * 1024) < 16384) sleep(3)
        else spin(0.3)
        beat()
      }
      fs.closeSync(fd)
      if (off !== want.length || !got.equals(want)) fail('fifo slow read: got ' + off + ' bytes, content ' + (got.equals(want) ? 'ok' : 'wrong'))
    }
  },
  // Atomics.wait: a timeout must not end early; a notify must wake it.
  atomics() {
    const a = new Int32Array(d.sab)
    for (let r = 0; r < d.rounds * 10; r++) {
      const t0 = process.hrtime.bigint()
      const res = Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 40)
      const ms = Number(process.hrtime.bigint() - t0) / 1e6
      if (res !== 'timed-out' || ms < 39.5) fail('Atomics.wait(40 ms) returned ' + res + ' after ' + ms.toFixed(2) + ' ms')
      // Ask the main thread for a notify, and wait for it.
      Atomics.store(a, 0, 0)
      parentPort.postMessage({ notifyMe: true })
      const woke = Atomics.wait(a, 0, 0, 5000)
      if (woke !== 'ok' && Atomics.load(a, 0) !== 1) fail('Atomics.wait for a notify returned ' + woke)
      spin(5)
      beat()
    }
  },
  // Child processes: output, exit codes, timing, stdin/stdout pipes.
  exec() {
    for (let r = 0; r < d.rounds * 3; r++) {
      const t0 = Date.now()
      cp.execSync('sleep 0.2')
      const ms = Date.now() - t0
      if (ms < 195) fail('sleep 0.2 took ' + ms + ' ms')
      const out = cp.execSync('echo hello-' + r).toString()
      if (out !== 'hello-' + r + '\\n') fail('echo gave ' + JSON.stringify(out))
      const input = pattern(1 << 20, r)
      const cat = cp.spawnSync('cat', [], { input, maxBuffer: 4 << 20 })
      if (cat.status !== 0 || !cat.stdout.equals(input)) fail('cat round trip: status ' + cat.status + ', ' + (cat.stdout && cat.stdout.length) + ' bytes')
      try { cp.execSync('exit 3', { stdio: 'ignore' }); fail('exit 3 did not throw') } catch (e) { if (e.status !== 3) fail('exit 3 gave status ' + e.status + ' ' + e.code) }
      beat()
    }
  },
  // A Unix-socket echo, byte-exact, from this worker's event loop.
  async unixEcho() {
    const net = require('net')
    for (let r = 0; r < d.rounds; r++) {
      const s = net.connect(d.unixPath)
      await new Promise((res, rej) => { s.once('connect', res); s.once('error', rej) })
      for (let i = 0; i < 100; i++) {
        const msg = pattern(1 + ((i * 977) % 100000), i)
        const got = await new Promise((res) => {
          const parts = []; let n = 0
          const on = (c) => { parts.push(c); n += c.length; if (n >= msg.length) { s.off('data', on); res(Buffer.concat(parts)) } }
          s.on('data', on); s.write(msg)
        })
        if (!got.equals(msg)) fail('unix echo ' + i + ': ' + got.length + ' bytes back of ' + msg.length)
        beat()
      }
      s.destroy()
    }
  },
  // The libuv pool and sync fs/zlib/crypto.
  async pool() {
    const zlib = require('zlib'), crypto = require('crypto'), dns = require('dns'), os = require('os'), path = require('path')
    const file = path.join(d.dir, 'big.bin')
    const data = pattern(8 << 20, 5)
    fs.writeFileSync(file, data)
    for (let r = 0; r < d.rounds * 4; r++) {
      if (!fs.readFileSync(file).equals(data)) fail('readFileSync content')
      const back = await fs.promises.readFile(file)
      if (!back.equals(data)) fail('promises.readFile content')
      const z = zlib.gunzipSync(zlib.gzipSync(data.subarray(0, 1 << 20)))
      if (!z.equals(data.subarray(0, 1 << 20))) fail('gzip round trip')
      const key = await new Promise((res, rej) => crypto.pbkdf2('pw', 'salt', 20000, 32, 'sha256', (e, k) => (e ? rej(e) : res(k))))
      if (key.toString('hex') !== crypto.pbkdf2Sync('pw', 'salt', 20000, 32, 'sha256').toString('hex')) fail('pbkdf2 async != sync')
      const addr = await new Promise((res, rej) => dns.lookup('localhost', (e, a) => (e ? rej(e) : res(a))))
      if (addr !== '127.0.0.1' && addr !== '::1') fail('dns.lookup(localhost) gave ' + addr)
      beat()
    }
  },
}
Promise.resolve().then(() => acts[d.act]()).then(
  () => parentPort.postMessage({ done: true, bad, ops }),
  (e) => parentPort.postMessage({ done: true, bad: [...bad, 'threw ' + (e.code || '') + ' ' + (e.stack || e)], ops }),
)
`

function startWorker(c, act, data, onMessage) {
  const w = new Worker(WORKER, { eval: true, workerData: { ...data, act } })
  const s = { act, last: Date.now(), ops: 0, tid: null }
  const done = new Promise((resolve) => {
    w.on('message', (m) => {
      s.last = Date.now()
      if (m.tid) s.tid = m.tid
      if (m.beat) {
        s.ops = m.beat
        progress(`${act}: ${m.beat}`)
      }
      if (onMessage) onMessage(m)
      if (m.done) {
        for (const b of m.bad) c.ok(false, `${act}: ${b}`)
        c.ok(m.bad.length === 0, `${act}: ${m.bad.length} wrong results`)
        resolve(m)
      }
    })
    w.on('error', (e) => {
      c.ok(false, `${act}: worker error ${e.code || ''} ${e.stack || e}`)
      resolve({ ops: s.ops })
    })
  })
  return { w, s, done }
}

/** The signal mask and ignored set a child process starts with. */
function childSignalState() {
  return execSync("grep -E '^Sig(Blk|Ign)' /proc/self/status").toString().trim()
}

async function echoServer(listenArgs) {
  const server = net.createServer((sock) => sock.pipe(sock))
  await new Promise((r) => server.listen(...listenArgs, r))
  return server
}

async function tcpClient(c, port, rounds) {
  let n = 0
  for (let r = 0; r < rounds; r++) {
    const s = net.connect(port, '127.0.0.1')
    await new Promise((res, rej) => {
      s.once('connect', res)
      s.once('error', rej)
    })
    for (let i = 0; i < 200; i++) {
      const msg = Buffer.from(`message-${r}-${i}-${'x'.repeat((i * 131) % 20000)}`)
      const got = await new Promise((res) => {
        const parts = []
        let len = 0
        const on = (chunk) => {
          parts.push(chunk)
          len += chunk.length
          if (len >= msg.length) {
            s.off('data', on)
            res(Buffer.concat(parts))
          }
        }
        s.on('data', on)
        s.write(msg)
      })
      c.ok(got.equals(msg), `tcp echo ${r}/${i}: ${got.length} bytes back of ${msg.length}`)
      n++
      progress(`tcp ${n}`)
    }
    s.destroy()
  }
  return n
}

/** Sends itself each signal `times` times; each handler must run once per signal. */
async function selfSignals(c, times) {
  const names = ['SIGUSR2', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGWINCH']
  const counts = Object.fromEntries(names.map((n) => [n, 0]))
  const handlers = names.map((n) => [n, () => counts[n]++])
  for (const [n, h] of handlers) process.on(n, h)
  for (let i = 0; i < times; i++) {
    for (const n of names) {
      const before = counts[n]
      process.kill(process.pid, n)
      const t0 = Date.now()
      while (counts[n] === before && Date.now() - t0 < 3000) await delay(2)
      c.eq(counts[n], before + 1, `${n} #${i}: handler calls`)
      progress(`signals ${i}`)
    }
  }
  for (const [n, h] of handlers) process.removeListener(n, h)
  return counts
}

// In a grandchild: SIGUSR1 starts the inspector while sampling at 1 kHz.
// It reports its profile's consistency and the CPU account (cpu.js).
const INSPECTOR_PROGRAM = (listener, mode) => `
const ms = require(${JSON.stringify(ADDON)})
const { checkProfile } = require(${JSON.stringify(path.join(__dirname, '..', 'lib', 'check.js'))})
const { cpuWindow, account } = require(${JSON.stringify(path.join(__dirname, '..', 'lib', 'cpu.js'))})
const inspector = require('inspector')
const { Worker } = require('worker_threads')
const w = new Worker('const e = Date.now() + 3000; let x = 0; while (Date.now() < e) x += Math.sqrt(x + 1)', { eval: true })
let heard = 0
${listener ? "process.on('SIGUSR1', () => heard++)" : ''}
const win = cpuWindow()
ms.start({ intervalMs: 1, mode: '${mode}' })
${mode === 'cpu' ? 'win.armed()' : ''}
setTimeout(() => process.kill(process.pid, 'SIGUSR1'), 300)
const t0 = Date.now()
const poll = setInterval(() => {
  const url = inspector.url()
  if (url || Date.now() - t0 > 2500) {
    clearInterval(poll)
    setTimeout(() => {
      inspector.close()
      const p = ms.stop()
      const acc = account(p, win.end())
      console.log(JSON.stringify({ url: url || null, heard, samples: p.stats.samplesCaptured, consistent: checkProfile(p, { mode: '${mode}' }), acc }))
      w.terminate().then(() => process.exit(0))
    }, 300)
  }
}, 20)
`

// In a grandchild: a process-directed signal nobody handles still kills.
const DIE_PROGRAM = `
const ms = require(${JSON.stringify(ADDON)})
const { Worker } = require('worker_threads')
new Worker('let x = 0; for (;;) x += Math.sqrt(x + 1)', { eval: true })
ms.start({ intervalMs: 1 })
console.log('ready')
setInterval(() => {}, 1000)
`

/**
 * Rows of a profile that are fresh captures: busy rows, and idle rows
 * whose stack differs from the thread's previous row. (Wall mode records
 * a thread that did not run since its last sample by repeating its last
 * stack, marked idle, without signalling it; a thread signalled while it
 * waits in a system call is captured and marked idle too, and only that
 * can bring a new stack.)
 */
function freshRows(p) {
  const prev = new Map()
  const fresh = new Uint8Array(p.samples.thread.length)
  for (let i = 0; i < fresh.length; i++) {
    const t = p.samples.thread[i]
    const stack = p.samples.stack[i]
    fresh[i] = !p.samples.idle[i] || prev.get(t) !== stack ? 1 : 0
    prev.set(t, stack)
  }
  return fresh
}

const SYSCALL = /^(__GI_|__libc_|__)?(read|write|pread64|pwrite64|futex|__futex\w*|epoll_wait|epoll_pwait|poll|ppoll|nanosleep|clock_nanosleep|wait4|waitpid|recv|send|recvmsg|sendmsg|accept4?|connect|pthread_cond_\w*wait\w*|syscall|__lll_lock_wait\w*)$/

/**
 * One pass of every activity with the sampler in `mode`, restarted every
 * 1.5 s. Returns the evidence of signals inside system calls: per
 * activity, fresh captures of its worker whose leaf is a system-call
 * wrapper.
 */
async function pass(o, c, mode, dir) {
  const rounds = o.rounds ?? 2
  const fifo = path.join(dir, `fifo-${mode}-`)
  for (let r = 0; r < rounds; r++) {
    execFileSync('mkfifo', [fifo + r])
    execFileSync('mkfifo', [fifo + 'big' + r])
  }
  const before = childSignalState()
  const unixPath = path.join(dir, `echo-${mode}.sock`)
  const tcp = await echoServer([0, '127.0.0.1'])
  const unix = await echoServer([unixPath])
  const sab = new SharedArrayBuffer(4)
  const a = new Int32Array(sab)

  const inSyscall = {}
  let workersRef = []
  const ms = require('../..')
  const onProfile = (p) => {
    const tids = new Map(workersRef.filter((w) => w.s.tid).map((w) => [w.s.tid, w.s.act]))
    if (tids.size === 0) return
    const syms = ms.symbolicate(p)
    const fresh = freshRows(p)
    for (let i = 0; i < p.samples.thread.length; i++) {
      if (!fresh[i]) continue
      const act = tids.get(p.threads[p.samples.thread[i]].tid)
      if (!act) continue
      const name = syms.functions.name[syms.frameFunction[p.stacks.frame[p.samples.stack[i]]]]
      if (SYSCALL.test(name)) inSyscall[act] = (inSyscall[act] || 0) + 1
    }
  }
  const sampling = new Sampling(c, { intervalMs: 1, churnMs: 1500, what: `signals (${mode})`, onProfile, mode })
  c.eq(childSignalState(), before, `${mode} mode: a child process sees the same signal mask and ignored set while sampling`)
  const data = { rounds, fifo, bytes: 1 << 20, unixPath, sab, dir }
  const workers = [
    startWorker(c, 'fifoRead', data),
    startWorker(c, 'fifoSlowWrite', data),
    startWorker(c, 'fifoBigWrite', data),
    startWorker(c, 'fifoSlowRead', data),
    startWorker(c, 'atomics', data, (m) => {
      if (m.notifyMe) setTimeout(() => {
        Atomics.store(a, 0, 1)
        Atomics.notify(a, 0)
      }, 5)
    }),
    startWorker(c, 'exec', data),
    startWorker(c, 'unixEcho', data),
    startWorker(c, 'pool', data),
  ]
  workersRef = workers
  const stallWatch = setInterval(() => {
    for (const { s } of workers) {
      if (!s.finished && Date.now() - s.last > 10000 && !s.reported) {
        s.reported = true
        c.hang(`${mode} mode: ${s.act} worker made no progress for 10 s (after ${s.ops} operations)`)
      }
    }
  }, 500)
  const [tcpDone, counts] = await Promise.all([tcpClient(c, tcp.address().port, rounds), selfSignals(c, rounds * 4)])
  const results = []
  for (const wk of workers) {
    results.push(await wk.done)
    wk.s.finished = true
  }
  clearInterval(stallWatch)
  sampling.stop()
  tcp.close()
  unix.close()
  const info = (c.info[mode] = {})
  info.ops = Object.fromEntries(workers.map((wk, i) => [wk.s.act, results[i].ops]))
  info.ops.tcpEcho = tcpDone
  info.signalsHandled = counts
  info.freshSamplesInsideSyscalls = inSyscall
  info.sampling = sampling.describe()
  // Every worker computes between its blocking calls: in either mode the
  // sampler's signals reached it (CPU mode: its own timer, while it ran).
  for (const { s } of workers) {
    c.ok((sampling.busyByTid.get(s.tid) || 0) > 0, `${mode} mode: the ${s.act} worker (tid ${s.tid}) was never sampled busy`)
  }
  if (mode === 'cpu') {
    info.cpuMode = sampling.checkCpu({ minIntervals: 200 })
  } else {
    // Wall mode signals a thread that ran since its last sample wherever it
    // is, so signals land inside the blocking calls (and must not break
    // them, which every activity's own checks show).
    const interrupted = Object.values(inSyscall).reduce((x, y) => x + y, 0)
    c.ok(interrupted > 50, `wall mode: only ${interrupted} samples caught a worker inside a system call: the blocking calls were hardly interrupted`)
  }
  c.eq(childSignalState(), before, `${mode} mode: a child process sees the same signal mask and ignored set after sampling`)
}

main(async (o, c) => {
  const dir = tmpdir('sig')
  // CPU mode: a thread is interrupted only by its own CPU timer, while it
  // runs; wall mode: by the sampler thread, inside its blocking calls too.
  for (const mode of ['cpu', 'wall']) await pass(o, c, mode, dir)

  // Grandchildren: SIGUSR1 and the inspector (CPU mode), a SIGUSR1
  // listener (wall mode), and unhandled signals.
  for (const [listener, mode] of [[false, 'cpu'], [true, 'wall']]) {
    const r = await runNode(INSPECTOR_PROGRAM(listener, mode), { nodeArgs: ['--inspect-port=0'], timeoutMs: 20000, node: o.node })
    let out = null
    try {
      out = JSON.parse(r.stdout.trim().split('\n').pop())
    } catch {}
    c.ok(r.code === 0 && out, `SIGUSR1${listener ? ' with a listener' : ''}: ${describe(r)}`)
    if (!out) continue
    c.samples += out.samples
    c.eq(out.consistent, 'ok', `SIGUSR1 (${mode} mode): the profile`)
    // The busy worker: its CPU time in CPU mode, a sample per tick in wall mode.
    const busiest = out.acc.threads.reduce((a, t) => (t.cpuNs > a.cpuNs ? t : a))
    if (mode === 'cpu') {
      for (const m of cpuProblems(out.acc.threads, { minIntervals: 100 })) c.ok(false, `SIGUSR1 (CPU mode): ${m}`)
      c.ok(busiest.busy > 0, `SIGUSR1 (CPU mode): the busiest thread (${busiest.cpuNs / 1e6} ms of CPU) has no sample`)
    } else {
      c.ok(busiest.busy > 0 && busiest.busy + busiest.idle >= out.acc.ticks * 0.8, `SIGUSR1 (wall mode): the busy worker has ${busiest.busy} busy and ${busiest.idle} idle samples in ${out.acc.ticks} ticks`)
    }
    if (listener) c.eq(out.heard, 1, 'SIGUSR1 listener calls')
    else c.ok(out.url && out.url.startsWith('ws://'), `SIGUSR1 did not start the inspector (url ${out.url})`)
    c.info[listener ? 'sigusr1Listener' : 'sigusr1Inspector'] = listener ? `heard ${out.heard}` : out.url
  }
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
    const file = path.join(dir, 'die.js')
    fs.writeFileSync(file, DIE_PROGRAM)
    const child = require('child_process').spawn(o.node || process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    const t0 = Date.now()
    while (!out.includes('ready') && Date.now() - t0 < 10000) await delay(20)
    await delay(300)
    child.kill(sig)
    const res = await Promise.race([new Promise((r) => child.on('exit', (code, signal) => r({ code, signal }))), delay(10000).then(() => null)])
    if (!res) child.kill('SIGKILL')
    c.ok(res, `${sig} to a sampling process with no handler: still running after 10 s`)
    if (res) c.eq(res.signal, sig, `${sig} to a sampling process with no handler: how it ended`)
  }
  fs.rmSync(dir, { recursive: true, force: true })
})
