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
  test('main thread and 4 worker_threads doing CPU work are all sampled', () => {
    const r = scenario('multithread', { workers: 4, ms: 1500, intervalMs: 10 })
    expectAccounting(r)
    const ticks = r.stats.ticks
    expect(ticks).toBeGreaterThan(100)
    const main = r.perTid[r.mainTid]
    expect(main.isMain).toBe(true)
    expect(main.samples).toBeGreaterThan(ticks * 0.8)
    for (const tid of r.workerTids) {
      const w = r.perTid[tid]
      expect(w).toBeDefined()
      // Sampled on most ticks. Five busy threads share two cores, so a
      // thread waiting for a core has not used CPU since its last sample
      // and is recorded as idle on that tick; still, most are running ones.
      expect(w.samples).toBeGreaterThan(ticks * 0.8)
      expect(w.samples - w.idle).toBeGreaterThan(ticks * 0.25)
      expect(w.maxDepth).toBeGreaterThan(5)
    }
    expect(r.stats.walkErrors).toBe(0)
  })

  test('sampling rate is within ±10% at 10 ms over 2 s on an idle main thread', () => {
    const r = scenario('rate', { intervalMs: 10, ms: 2000 })
    const main = r.perTid[r.mainTid]
    const expected = r.durationMs / 10
    expect(main.samples / expected).toBeGreaterThan(0.9)
    expect(main.samples / expected).toBeLessThan(1.1)
    // The idle main thread is carried forward, not stopped every tick.
    expect(main.idle).toBeGreaterThan(main.samples * 0.8)
    expectAccounting(r)
  })

  test('a thread started after start() is sampled', () => {
    const r = scenario('late')
    const t = r.perTid[r.lateTid]
    expect(t).toBeDefined()
    expect(t.samples).toBeGreaterThan(30) // 600 ms at 10 ms
    expect(t.samples - t.idle).toBeGreaterThan(20)
  })

  test('threads exiting during 1 kHz sampling are skipped, not errors', () => {
    const r = scenario('churn', { threads: 60 })
    expectAccounting(r)
    expect(r.threads).toBeGreaterThanOrEqual(60)
    expect(r.stats.threadsSkipped).toBeGreaterThan(0)
    expect(r.stats.walkErrors).toBe(0)
  })

  test('threads blocked in I/O appear, and their I/O completes intact', () => {
    const r = scenario('blocked')
    expect(r.read).toBe('hello from the writer')
    expect(r.echoed).toBe(200)
    const reader = r.perTid[r.readerTid]
    expect(reader).toBeDefined()
    expect(reader.samples).toBeGreaterThan(100) // >= 600 ms at 1 ms, mostly idle
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
    expect(r.samples).toBe(50)
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
  test('an allocation storm on every thread at 1 kHz passes the allocator check', () => {
    const r = scenario('allocStorm', { ms: 1500 }, { env: { MACHSAMPLER_ALLOC_CHECK: '1' } })
    expect(r.samples).toBeGreaterThan(1000)
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
