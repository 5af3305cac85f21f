'use strict'
// Reproducer: symbolicate() blocks forever when a module path in the
// profile names a FIFO.
//
// The symbolizer opens each module file with a plain blocking open(2)
// (no O_NONBLOCK, no is-regular-file check first). Opening a FIFO for
// reading blocks until some process opens it for writing, so the call
// never returns. A profile read back from a file carries its module paths
// verbatim, so `machsampler report some.machprof` (which symbolicates
// profiles saved without names) hangs the same way on a crafted or
// unlucky file. Expected: the module is skipped (frames stay addresses)
// or a coded error, promptly.
//
//   node stress/repro/symbolicate-fifo-module.js   exit 1 if it hangs (5 s)

const { execFileSync, spawnSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')

if (process.argv[2] === 'child') {
  const ms = require(path.join(__dirname, '..', '..'))
  ms.start({ intervalMs: 1 })
  const end = Date.now() + 50
  while (Date.now() < end);
  const p = ms.stop()
  p.modules[0] = { ...p.modules[0], path: process.argv[3], buildId: '' }
  ms.symbolicate(p)
  console.log('returned')
} else {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-fifo-'))
  const fifo = path.join(dir, 'fifo')
  execFileSync('mkfifo', [fifo])
  const r = spawnSync(process.execPath, [__filename, 'child', fifo], { encoding: 'utf8', timeout: 5000 })
  fs.rmSync(dir, { recursive: true, force: true })
  if (r.error && r.error.code === 'ETIMEDOUT') {
    console.log('REPRODUCED: symbolicate() still blocked after 5 s on a module path that is a FIFO')
    process.exit(1)
  }
  console.log(`not reproduced: ${r.stdout.trim()} (status ${r.status})`)
}
