'use strict'
// `--sanitizers`: the crate's Rust tests (unit tests, which include the
// signal handler, slot table, sampler loop, exporters and readers, and
// the walker fuzz) built with AddressSanitizer, which brings
// LeakSanitizer along. -Zsanitizer needs a nightly compiler with the
// sanitizer runtimes: rustup's nightly toolchain (Debian's rustc-web has
// no ASan runtime). The standard library stays uninstrumented (no
// rust-src for nightly here), so ASan checks the crate and its
// dependencies; LeakSanitizer sees every allocation. Any ASan or LSan
// report, or a failing test, fails the run.

const fs = require('fs')
const os = require('os')
const path = require('path')
const { main, progress } = require('../lib/child')
const { run, describe, ROOT } = require('../lib/proc')

main(async (o, c) => {
  const triple = `${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-unknown-linux-gnu`
  const home = process.env.RUSTUP_HOME || path.join(os.homedir(), '.rustup')
  const runtime = path.join(home, 'toolchains', `nightly-${triple}`, 'lib', 'rustlib', triple, 'lib', 'librustc-nightly_rt.asan.a')
  if (!c.ok(fs.existsSync(runtime), `rustup's nightly toolchain with the ASan runtime is needed (${runtime}): rustup toolchain install nightly`)) return
  const env = {
    RUSTFLAGS: '-Zsanitizer=address -Cforce-frame-pointers=yes',
    CARGO_TARGET_DIR: 'target/asan',
    // Locals stay on the real stack (the signal-handler tests look up the
    // stack's bounds from a local's address); leaks are reported at exit.
    ASAN_OPTIONS: 'detect_leaks=1:detect_stack_use_after_return=0:abort_on_error=0',
    PROPTEST_CASES: String(o.cases ?? 2000),
  }
  const args = ['+nightly', 'test', '--target', triple, '--lib', '--test', 'walker_fuzz', '--', '--test-threads=1']
  const r = await run('cargo', args, { cwd: ROOT, env, timeoutMs: 2400000, note: 'cargo test under ASan' })
  const out = r.stdout + r.stderr
  const results = [...out.matchAll(/test result: (\w+)\. (\d+) passed; (\d+) failed/g)].map((m) => ({ ok: m[1] === 'ok', passed: Number(m[2]), failed: Number(m[3]) }))
  const asan = (out.match(/ERROR: (AddressSanitizer|LeakSanitizer)[^\n]*/g) || [])
  c.ok(r.code === 0, `cargo test under ASan: ${describe(r)}`)
  c.ok(results.length >= 2 && results.every((x) => x.ok), `test results under ASan: ${JSON.stringify(results)}`)
  c.eq(asan, [], 'AddressSanitizer / LeakSanitizer reports')
  for (const x of results) c.checks += x.passed
  c.info.toolchain = (await run('rustc', ['+nightly', '--version'])).stdout.trim()
  c.info.tests = results
  c.info.sanitizerReports = asan.length
  if (asan.length) c.info.firstReport = out.slice(out.indexOf('ERROR: '), out.indexOf('ERROR: ') + 3000)
  progress('done')
})
