'use strict'
// Complete stacks through code that framehop cannot unwind alone: OpenSSL's
// sha512 assembly on the libuv pool, whose CFI computes the CFA with a
// DWARF expression that reads the stack. Each stack must reach its
// thread's first frame (start_thread/clone3), through PBKDF2 and libuv's
// worker loop, on the Node majors whose OpenSSL differs.
const { spawnSync } = require('child_process')
const path = require('path')
const { fetchNode } = require('../scripts/fetch-node')

const FIXTURE = path.join(__dirname, 'fixtures', 'pool-unwind.js')
const supported = process.platform === 'linux' && process.arch === 'x64'
const describeLinux = supported ? describe : describe.skip

describeLinux.each([['this Node', null], ['Node 20', 20], ['Node 22', 22]])('%s', (_label, major) => {
  test('libuv pool stacks through OpenSSL sha512 reach the thread root', () => {
    const node = major ? fetchNode(major) : process.execPath
    const r = spawnSync(node, [FIXTURE], {
      env: { ...process.env, MACHSAMPLER_ALLOC_CHECK: '1' },
      encoding: 'utf8',
      timeout: 120000,
    })
    expect(r.status).toBe(0)
    const out = JSON.parse(r.stdout.trim().split('\n').pop())
    expect(out.pool.samples).toBeGreaterThan(40)
    expect(out.pool.complete / out.pool.samples).toBeGreaterThanOrEqual(0.9)
    // Where the CPU goes: sha512 leaves, each under PBKDF2, each complete.
    expect(out.sha512Leaves).toBeGreaterThan(20)
    expect(out.sha512Complete / out.sha512Leaves).toBeGreaterThanOrEqual(0.9)
    expect(out.sha512WithPbkdf2 / out.sha512Leaves).toBeGreaterThanOrEqual(0.9)
  }, 300000)
})
