'use strict'
// Function names and thread kinds as the bench compares them: perf and
// machsampler name the same code differently (perf keeps V8's raw
// "JS:*name" form and parameter lists), so both are reduced to a bare
// function name; a stack is complete when its outermost frame is a
// thread's entry point.

/** A thread's entry point: a stack that ends here is complete. */
const ROOTS = /^(_start|__libc_start_main|__libc_start_call_main|start_thread|clone3?|__clone3?)$/

/** A bare function name: JS frames as `js:<name>`, C++ without parameters or clone suffixes. */
function normalizeName(n) {
  let s = n.trim()
  const js = s.match(/^(?:JS|LazyCompile|Function):[*~^+']*(\S*)/)
  if (js) return 'js:' + (js[1] || '(anonymous)')
  const ours = s.match(/^(\S+) \((?:\S+:\d+(?::\d+)?|[^)]*)\)$/)
  if (ours && !s.includes('::')) return 'js:' + ours[1]
  s = s.replace(/\s*\[clone [^\]]*\]/g, '').replace(/\.(constprop|isra|part|cold)\.\d+/g, '')
  // Drop parameter lists, keeping the qualified name.
  let depth = 0
  let cut = -1
  for (let i = s.length - 1; i >= 0; i--) {
    if (s[i] === ')') depth++
    else if (s[i] === '(') {
      depth--
      if (depth === 0) {
        cut = i
        break
      }
    }
  }
  if (cut > 0 && s.endsWith(')')) s = s.slice(0, cut)
  return s.replace(/ const$/, '')
}

/**
 * What a thread is, from its name (Node names its threads) and, failing
 * that, from the functions seen on it.
 */
function threadKind(thread, names) {
  if (thread.isMain) return 'main'
  const n = thread.name || ''
  if (/^addon-/.test(n)) return 'addon'
  if (/^libuv-worker/.test(n)) return 'libuv pool'
  if (/^V8 /.test(n)) return 'V8 platform'
  const has = (re) => names.some((x) => re.test(x))
  if (has(/node::worker::Worker::Run|node::worker::Worker::StartThread/)) return 'worker_thread'
  if (has(/^worker$|uv__threadpool|uv__work_done|uv__worker/) || /^node$/.test(n) && has(/^worker$/)) return 'libuv pool'
  if (has(/PlatformWorkerThread|WorkerThreadsTaskRunner|DelayedTaskScheduler/)) return 'V8 platform'
  return n ? `other (${n})` : 'other'
}

module.exports = { ROOTS, normalizeName, threadKind }
