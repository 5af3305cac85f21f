'use strict'
// The sampler through the built addon: every thread, rates, lifecycles,
// depth, accounting. Scenarios run in child processes (see helpers.js).
const { scenario, scenarioRaw } = require('./helpers')

const linux = process.platform === 'linux'
// The scenarios find worker tids through /proc/thread-self.
const describeLinux = linux ? describe : describe.skip

function expectAccounting(r) {
  const s = r.stats
  expect(r.consistent).toBe('ok')
  expect(s.threadsSampled).toBe(s.samplesCaptured + s.samplesDropped)
  expect(s.samplesCaptured).toBe(r.samples)
  for (const [k, ok] of Object.entries(r.typed)) expect([k, ok]).toEqual([k, true])
}

describeLinux('sampling every thread', () => {
  test('CPU mode: main thread and 4 worker_threads are sampled for the CPU time each used', () => {
    const r = scenario('multithread', { workers: 4, ms: 1500, intervalMs: 10 })
    expectAccounting(r)
    const main = r.perTid[r.mainTid]
    expect(main.isMain).toBe(true)
    for (const tid of [r.mainTid, ...r.workerTids]) {
      const t = r.perTid[tid]
      expect(t).toBeDefined()
      // Five busy threads share two cores: each used about 40 % of 1.5 s.
      // Its samples stand for its own CPU time, whatever the share.
      const intervals = r.cpuNs[tid] / 10e6
      const near = Math.abs(t.samples - intervals) <= Math.max(3, intervals * 0.1)
      expect({ tid, samples: t.samples, intervals, near }).toEqual({ tid, samples: t.samples, intervals, near: true })
      expect(t.idle).toBe(0)
      expect(t.maxDepth).toBeGreaterThan(5)
    }
    expect(r.stats.walkErrors).toBe(0)
    // A thread's first samples are read the slow, safe way until its stack
    // bounds are known; after that, directly.
    expect(r.stats.foreignStacks).toBeLessThan(r.rows * 0.2)
  })

  test('wall mode: every busy thread is sampled on most ticks', () => {
    const r = scenario('multithread', { workers: 4, ms: 1500, intervalMs: 10, mode: 'wall' })
    expectAccounting(r)
    const ticks = r.stats.ticks
    expect(ticks).toBeGreaterThan(100)
    for (const tid of [r.mainTid, ...r.workerTids]) {
      const w = r.perTid[tid]
      // A thread waiting for a core has not used CPU since its last
      // sample and is recorded as idle on that tick; most are running ones.
      expect(w.samples).toBeGreaterThan(ticks * 0.8)
      expect(w.samples - w.idle).toBeGreaterThan(ticks * 0.25)
      expect(w.maxDepth).toBeGreaterThan(5)
    }
    expect(r.stats.walkErrors).toBe(0)
  })

  test('wall mode: the rate is within ±10% at 10 ms over 2 s on an idle main thread, in a few rows', () => {
    const r = scenario('rate', { intervalMs: 10, ms: 2000 })
    const main = r.perTid[r.mainTid]
    const expected = r.durationMs / 10
    expect(main.samples / expected).toBeGreaterThan(0.9)
    expect(main.samples / expected).toBeLessThan(1.1)
    // The idle main thread is carried forward, not stopped every tick, and
    // its idle samples with the same stack share rows.
    expect(main.idle).toBeGreaterThan(main.samples * 0.8)
    expect(main.rows).toBeLessThan(main.samples * 0.2)
    expectAccounting(r)
  })

  test('a thread started after start() is sampled', () => {
    const r = scenario('late')
    const t = r.perTid[r.lateTid]
    expect(t).toBeDefined()
    // Its samples stand for the CPU time it used (about 600 ms).
    const intervals = r.lateCpuNs / 10e6
    expect(intervals).toBeGreaterThan(10)
    expect(Math.abs(t.samples - intervals)).toBeLessThanOrEqual(Math.max(3, intervals * 0.1))
    expect(t.idle).toBe(0)
  })

  test.each(['cpu', 'wall'])('%s mode: threads exiting during 1 kHz sampling are no errors', (mode) => {
    const r = scenario('churn', { threads: 60, mode })
    expectAccounting(r)
    expect(r.threads).toBeGreaterThanOrEqual(60)
    // Wall mode signals threads the sampler listed, some of which are gone
    // by then: skipped, not errors.
    if (mode === 'wall') expect(r.stats.threadsSkipped).toBeGreaterThan(0)
    expect(r.stats.walkErrors).toBe(0)
  })

  test('threads blocked in I/O appear, and their I/O completes intact', () => {
    const r = scenario('blocked')
    expect(r.read).toBe('hello from the writer')
    expect(r.echoed).toBe(200)
    const reader = r.perTid[r.readerTid]
    expect(reader).toBeDefined()
    expect(reader.samples).toBeGreaterThan(100) // >= 600 ms at 1 ms, mostly idle (wall mode)
    expectAccounting(r)
  })

  test('200-deep JS recursion gives stacks deeper than 50 frames; a cap of 8 truncates', () => {
    const deep = scenario('deep')
    expect(deep.perTid[deep.mainTid].maxDepth).toBeGreaterThan(50)
    const capped = scenario('deep', { maxStackDepth: 8 })
    expect(capped.maxDepth).toBeLessThanOrEqual(8)
    expect(capped.perTid[capped.mainTid].maxDepth).toBe(8)
    expect(capped.stats.truncatedStacks).toBeGreaterThan(0)
  })

  test('nativeUnwinding: false records the leaf only; it can be switched while running', () => {
    const r = scenario('leafOnly')
    expect(r.during).toBe(false)
    expect(r.leaf.maxDepth).toBe(1)
    expect(r.toggled.maxDepth).toBeGreaterThan(1)
  })

  test('a full buffer drops samples and counts every one', () => {
    const r = scenario('smallBuffer')
    expect(r.rows).toBe(10)
    expect(r.stats.samplesDropped).toBeGreaterThan(0)
    expectAccounting(r)
  })

  test('100 start/stop cycles', () => {
    const r = scenario('cycles', { cycles: 100 })
    expect(r.cycles).toBe(100)
    expect(r.running).toBe(false)
    expect(r.samples).toBeGreaterThan(0)
  })
})

describeLinux('process-wide sampler', () => {
  test('loaded in several workers and the main thread; a worker is terminated mid-sampling', () => {
    const r = scenario('global')
    expect(r.runningAfterStarterExit).toBe(true)
    expect(r.othersSawRunning).toEqual([true, true, true])
    expectAccounting(r)
  })

  test('process.exit() while sampling exits promptly with its code', () => {
    const t0 = Date.now()
    const r = scenarioRaw('exitWhileSampling', {}, { timeoutMs: 20000 })
    expect(r.signal).toBeNull()
    expect(r.status).toBe(7)
    expect(Date.now() - t0).toBeLessThan(15000)
  })
})

describeLinux('no allocation while a thread is stopped', () => {
  test.each(['cpu', 'wall'])('%s mode: an allocation storm on every thread at 1 kHz passes the allocator check', (mode) => {
    const r = scenario('allocStorm', { ms: 1500, mode }, { env: { MACHSAMPLER_ALLOC_CHECK: '1' } })
    // Handlers ran on allocating threads, many times (in CPU mode, as many
    // as the CPU time the threads got allows).
    expect(r.rows).toBeGreaterThan(100)
    expectAccounting(r)
  })

  test('the check is live: an allocation injected into the window aborts the process', () => {
    const r = scenarioRaw('allocStorm', { ms: 500 }, {
      env: { MACHSAMPLER_ALLOC_CHECK: '1', MACHSAMPLER_FAULT_INJECTION: 'alloc-in-window' },
    })
    expect(r.signal).toBe('SIGABRT')
    expect(r.stderr).toContain('heap allocation while a sampled thread is stopped')
  })
})

if (!linux) {
  test(`Linux scenario suites skipped: they identify threads via /proc/thread-self (platform ${process.platform})`, () => {
    expect(linux).toBe(false)
  })
}
