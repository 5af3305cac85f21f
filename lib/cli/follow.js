'use strict'
// Following a command's Node.js processes (`record`, the default): every
// Node process the command starts inherits the preload through
// NODE_OPTIONS and leaves in the session directory
//   proc-<pid>.json        its pid, parent and command line, at start
//   raw-<pid>.machprof     its profile, when it exits
//   raw-<pid>.partial.machprof  its profile up to a signal (SIGINT, SIGTERM,
//                          SIGHUP), used if it never wrote the whole one
//   children-<pid>.jsonl   the child processes it spawned
//   threads-<pid>.jsonl    its Workers: threadId with script, threadId with OS tid
// This module gathers them once the command has exited: which profiles to
// merge, each one's command, the roles of worker threads, and the children
// that were not Node.js (listed, never touched).

const fs = require('fs')
const path = require('path')

const text = require('./text')

/** How long `record` waits for processes still writing their profile. */
const WAIT_MS = 5000
const POLL_MS = 50

function readJson(file) {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch {
    return null
  }
}

function readLines(file) {
  let body
  try {
    body = fs.readFileSync(file, 'utf8')
  } catch {
    return []
  }
  const out = []
  for (const line of body.split('\n')) {
    try {
      if (line) out.push(JSON.parse(line))
    } catch {
      // A line cut short by a crash: skip it.
    }
  }
  return out
}

function alive(pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return e.code === 'EPERM'
  }
}

function files(dir, re) {
  return fs
    .readdirSync(dir)
    .map((name) => re.exec(name))
    .filter(Boolean)
}

/** `worker <threadId> (<script>)` by OS thread id, from every process's log. */
function threadRoles(dir) {
  const roles = {}
  for (const m of files(dir, /^threads-(\d+)\.jsonl$/)) {
    const script = new Map()
    const tid = new Map()
    for (const r of readLines(path.join(dir, m[0]))) {
      if (r.script !== undefined) script.set(r.threadId, r.script)
      if (r.tid !== undefined) tid.set(r.threadId, r.tid)
    }
    for (const [threadId, t] of tid) {
      roles[t] = script.has(threadId) ? `worker ${threadId} (${script.get(threadId)})` : `worker ${threadId}`
    }
  }
  return roles
}

/** A command line as a user would type it: `node app.js`, not the full path of node. */
function commandLine(argv) {
  if (!Array.isArray(argv) || argv.length === 0) return ''
  return [path.basename(argv[0]), ...argv.slice(1)].join(' ')
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Waits for every process that started recording to write its profile
 * (while it is alive, up to WAIT_MS), then lists what there is.
 */
async function collect(dir, topPid) {
  const deadline = Date.now() + WAIT_MS
  let procs
  for (;;) {
    procs = files(dir, /^proc-(\d+)\.json$/).map((m) => ({ pid: Number(m[1]), ...readJson(path.join(dir, m[0])) }))
    const pending = procs.filter((p) => !fs.existsSync(path.join(dir, `raw-${p.pid}.machprof`)) && alive(p.pid))
    if (pending.length === 0 || Date.now() > deadline) break
    await sleep(POLL_MS)
  }
  procs.sort((a, b) => (a.startedMs || 0) - (b.startedMs || 0) || a.pid - b.pid)
  // The whole profile, or the one kept at a signal by a process killed
  // before it could write the whole one.
  const raws = new Map()
  for (const p of procs) {
    const raw = [`raw-${p.pid}.machprof`, `raw-${p.pid}.partial.machprof`].map((n) => path.join(dir, n)).find((f) => fs.existsSync(f))
    if (raw) raws.set(p, raw)
  }
  const rawOf = (p) => raws.get(p)
  const done = procs.filter((p) => raws.has(p))
  const cutShort = done
    .filter((p) => rawOf(p).endsWith('.partial.machprof'))
    .map((p) => ({ pid: p.pid, command: commandLine(p.argv), running: alive(p.pid) }))
  const missing = procs
    .filter((p) => !done.includes(p))
    .map((p) => ({ pid: p.pid, command: commandLine(p.argv), running: alive(p.pid) }))
  const node = new Set(procs.map((p) => p.pid))
  const children = files(dir, /^children-(\d+)\.jsonl$/).flatMap((m) => readLines(path.join(dir, m[0])))
  if (topPid !== undefined && !children.some((c) => c.pid === topPid)) children.unshift({ pid: topPid, command: '' })
  // A synchronous child logged without its pid was Node if a process this
  // one started then recorded itself.
  const nodeChild = (c) =>
    c.pid === null && procs.some((p) => p.ppid === c.parent && p.startedMs >= c.from && p.startedMs <= c.to)
  const notNode = children.filter((c) => !node.has(c.pid) && !nodeChild(c) && c.command !== '')
  return {
    raws: done.map(rawOf),
    commands: done.map((p) => commandLine(p.argv)),
    threadRoles: threadRoles(dir),
    missing,
    cutShort,
    notNode,
    topIsNode: topPid === undefined || node.has(topPid),
  }
}

/** --no-follow: the one profile of the first Node process. */
function single(dir) {
  const raw = ['raw.machprof', 'raw.partial.machprof'].map((n) => path.join(dir, n)).find((f) => fs.existsSync(f))
  return {
    raws: raw ? [raw] : [],
    commands: [],
    threadRoles: threadRoles(dir),
    missing: [],
    cutShort: raw && raw.endsWith('.partial.machprof') ? [{ pid: null, command: '' }] : [],
    notNode: [],
    topIsNode: true,
  }
}

/**
 * A command line short enough for one summary line: node's options (a
 * test runner passes each file's process dozens) become `[options]`, and
 * what is still too long is cut.
 */
function shortCommand(command, max = 120) {
  if (command.length <= max) return command
  const words = command.split(' ')
  let first = 1
  while (first < words.length && words[first].startsWith('-')) first++
  const short = first > 1 ? [words[0], '[options]', ...words.slice(first)].join(' ') : command
  return short.length <= max ? short : short.slice(0, max - 1) + '…'
}

/** Summary lines: every process recorded, and the ones that were not. */
function processLines(summary, session) {
  const lines = []
  const procs = summary.processes
  if (procs.length > 1) {
    lines.push(`  processes ${procs.length} Node.js processes profiled:`)
    const w = Math.max(...procs.map((p) => text.int(p.samples).length))
    for (const p of procs) {
      lines.push(`            pid ${String(p.pid).padEnd(7)} ${text.int(p.samples).padStart(w)} samples  ${shortCommand(p.command)}`)
    }
  }
  for (const c of session.cutShort || []) {
    const who = c.pid === null ? 'the program' : `${shortCommand(c.command)} (pid ${c.pid})`
    const why = c.running ? 'was still running when the command ended' : 'was killed before it could save'
    lines.push(`  cut short: ${who} ${why}; its profile ends at its last checkpoint (a signal, or every --checkpoint seconds)`)
  }
  for (const m of session.missing) {
    const why = m.running ? 'still running when the command ended' : 'ended without writing its profile'
    lines.push(`  not profiled: ${shortCommand(m.command)} (pid ${m.pid}): ${why}`)
  }
  if (session.notNode.length > 0) {
    const list = session.notNode.map((c) => (c.pid === null ? shortCommand(c.command) : `${shortCommand(c.command)} (pid ${c.pid})`))
    const shown = list.slice(0, 5).join(', ') + (list.length > 5 ? `, and ${list.length - 5} more` : '')
    lines.push(`  not Node.js, not profiled: ${shown}`)
    // `NODE_OPTIONS=… node app.js` in a shell command (an npm script) sets
    // node's options in place of the ones that carry the preload.
    const replaced = session.notNode.find((c) => /(^|[\s;&|(])NODE_OPTIONS=/.test(c.command))
    if (replaced) {
      lines.push(
        `            (${shortCommand(replaced.command)} sets NODE_OPTIONS itself, which drops machsampler's preload: ` +
          'a Node.js process it starts is not profiled; set those options in the environment of record instead, ' +
          "e.g. NODE_OPTIONS='…' machsampler record -- …)",
      )
    }
  }
  return lines
}

module.exports = { collect, single, processLines, commandLine, shortCommand, threadRoles }
