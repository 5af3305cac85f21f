'use strict'
// A loopback HTTP server whose route calls small functions V8 inlines
// (parse, validate, hash, render) under load from a client process (8
// keep-alive connections for opts.ms). With opts.sample it profiles itself
// with machsampler (opts.mode, CPU by default) from 800 ms on and prints the
// main thread's JS self-time shares: each running sample counts for the
// innermost JS function on its stack, as V8's profiler counts native code
// called from JS for its caller, and garbage collection for none.
// Otherwise it just runs, for --cpu-prof.
//
// opts.pin ([server CPU, client CPU]): the server process (all its threads,
// the profilers' included) and the client each on a core of its own. When
// they share two cores, `--cpu-prof`'s run of the server puts about 53 % of
// its JS time in `writevGeneric` (the loopback write, which wakes the
// client) against 26 % pinned, while machsampler and perf give about 25 %
// either way: the split then moves with `--cpu-prof`'s own load.
const http = require('http')
const crypto = require('crypto')
const { spawn, spawnSync } = require('child_process')

const opts = JSON.parse(process.argv[2] || '{}')
if (opts.pin) {
  const r = spawnSync('taskset', ['-a', '-p', '-c', String(opts.pin[0]), String(process.pid)], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`taskset failed: ${r.stderr || r.error}`)
}

function parseQuery(url) {
  const q = {}
  const i = url.indexOf('?')
  if (i < 0) return q
  for (const kv of url.slice(i + 1).split('&')) {
    const [k, v] = kv.split('=')
    q[k] = v
  }
  return q
}
function validateUser(q) {
  return typeof q.user === 'string' && q.user.length > 0 && q.user.length < 64
}
function hashPayload(s) {
  return crypto.createHash('sha256').update(s).digest('hex')
}
function scoreItems(n) {
  let s = 0
  for (let i = 0; i < n; i++) s += (i * 2654435761) % 97
  return s
}
function renderBody(user, h, score) {
  return JSON.stringify({ user, h, score, items: [1, 2, 3].map((x) => x * score) })
}
function handleRequest(req, res) {
  const q = parseQuery(req.url)
  if (!validateUser(q)) {
    res.statusCode = 400
    return res.end()
  }
  const h = hashPayload(q.user + req.url)
  const score = scoreItems(2000)
  res.setHeader('content-type', 'application/json')
  res.end(renderBody(q.user, h, score))
}

const CLIENT = (port, ms) => `
const http = require('http')
const agent = new http.Agent({ keepAlive: true, maxSockets: 8 })
const end = Date.now() + ${ms}
let inflight = 0
let n = 0
function go() {
  while (inflight < 8 && Date.now() < end) {
    inflight++
    http.get({ host: '127.0.0.1', port: ${port}, path: '/api?user=u' + (n++ % 50) + '&x=1', agent }, (r) => {
      r.resume()
      r.on('end', () => { inflight--; go() })
    })
  }
  if (Date.now() >= end && inflight === 0) process.exit(0)
}
go()`

// V8's garbage collection on the main thread, entered from allocation:
// V8's profiler counts such samples as "(garbage collector)", for no JS
// function, so they count for none here too (opts.countGc: for the caller).
const GC = /^v8::internal::(Heap::Collect\w*Garbage|IncrementalMarking::)/

// machsampler's own work on the main thread (V8 describing the existing
// code for names, at the first interrupt check after start(), and the
// frame-layout check): counted for none, as --cpu-prof's own set-up,
// done before it samples, is in no profile of its own.
const OWN = /^machsampler::/

function jsSelfShares(ms, p) {
  const s = ms.symbolicate(p)
  const self = new Map()
  let total = 0
  samples: for (let i = 0; i < p.samples.stack.length; i++) {
    if (p.samples.idle[i] || !p.threads[p.samples.thread[i]].isMain) continue
    for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) {
      if (OWN.test(s.functions.name[s.frameFunction[p.stacks.frame[n]]])) continue samples
    }
    for (let n = p.samples.stack[i]; n >= 0; n = p.stacks.parent[n]) {
      const f = s.frameFunction[p.stacks.frame[n]]
      if (!opts.countGc && GC.test(s.functions.name[f])) continue samples
      if (s.functions.kind[f] !== 'js') continue
      const name = s.functions.name[f].replace(/ \(.*$/, '')
      const w = p.samples.weight ? p.samples.weight[i] : 1 // CPU mode: the intervals a sample stands for
      self.set(name, (self.get(name) || 0) + w)
      total += w
      break
    }
  }
  return Object.fromEntries([...self].map(([k, v]) => [k, v / total]))
}

const server = http.createServer(handleRequest)
server.listen(0, '127.0.0.1', () => {
  const ms = opts.sample ? require('../..') : null
  const clientArgv = [process.execPath, '-e', CLIENT(server.address().port, opts.ms || 4000)]
  if (opts.pin) clientArgv.unshift('taskset', '-c', String(opts.pin[1]))
  const client = spawn(clientArgv[0], clientArgv.slice(1), { stdio: 'inherit' })
  if (ms) setTimeout(() => ms.start({ intervalMs: opts.intervalMs || 1, mode: opts.mode || 'cpu' }), 800)
  client.on('exit', () => {
    if (ms) process.stdout.write(JSON.stringify(jsSelfShares(ms, ms.stop())) + '\n')
    server.close()
    process.exit(0)
  })
})
