'use strict'
// Walker fuzzing: runs tests/walker_fuzz.rs (proptest over walk_stack,
// stacks between PROT_NONE guard pages, checked against a reference
// model) and tests/unwind_fuzz.rs (the CFI unwinder over copied stacks,
// real and mutated unwind information) with PROPTEST_CASES cases per
// property: a few thousand in CI
// (debug build, overflow checks on, reusing `cargo test`'s build),
// hundreds of thousands in the full run (release build).

const { main, progress } = require('../lib/child')
const { run, describe, ROOT } = require('../lib/proc')

main(async (o, c) => {
  const cases = o.cases ?? 20000
  const args = ['test', '--test', 'walker_fuzz', '--test', 'unwind_fuzz']
  if (o.profile === 'release') args.push('--release')
  args.push('--', '--nocapture', '--test-threads=2')
  const r = await run('cargo', args, {
    cwd: ROOT,
    env: { PROPTEST_CASES: String(cases) },
    timeoutMs: 1200000,
    note: `cargo ${args.join(' ')}`,
  })
  const results = [...r.stdout.matchAll(/test result: (\w+)\. (\d+) passed; (\d+) failed/g)]
  const passed = results.length === 2 && results.every((m) => m[1] === 'ok' && m[3] === '0')
  // A failed property names its case in the panic message, which the
  // stderr's tail (a backtrace) does not reach: keep each panic whole.
  const panics = [...(r.stderr + r.stdout).matchAll(/^thread '[^']*'(?: \(\d+\))? panicked at [^\n]*\n(?:(?!\s*stack backtrace:|note: )[^\n]*\n){0,60}/gm)]
    .map((m) => m[0].slice(0, 6000))
    .join('\n')
  c.ok(r.code === 0 && passed, `cargo test --test walker_fuzz --test unwind_fuzz: ${describe(r)}\n${panics}\n${r.stdout.slice(-3000)}`)
  let total = 0
  const lines = []
  for (const m of (r.stderr + r.stdout).matchAll(/^(.*?): (\d+) (cases|walks)(.*)$/gm)) {
    total += Number(m[2])
    lines.push(m[0])
  }
  // validate_frame_pointer_is_exact and the unmapped-bounds property run
  // 10x the cases without printing.
  total += 2 * 10 * cases
  c.checks += total
  c.info.cases = total
  c.info.runs = lines
  c.info.profile = o.profile || 'dev'
  progress('done')
})
