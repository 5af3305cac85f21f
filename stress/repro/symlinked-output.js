'use strict'
// Reproducer: outputs replaced the path instead of writing through it.
//
// Profiles were written to a temporary file renamed over the output path,
// so a symbolic link was replaced by a regular file, and `-o /dev/stdout`
// wrote nothing to stdout (as root with a private /dev it replaced the
// link). Now a link is written through (atomically when it ends at a
// regular file) and a pipe or terminal is streamed to.
//
//   node stress/repro/symlinked-output.js   exit 1 if reproduced

const fs = require('fs')
const os = require('os')
const path = require('path')
const { ROOT, verdict, spawnSync } = require('./lib')

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'machsampler-links-'))
const problems = []
try {
  const prog = path.join(dir, 'prog.js')
  fs.writeFileSync(prog, 'const end = Date.now() + 200; let x = 0; while (Date.now() < end) x += Math.sqrt(x + 1)\n')
  const cli = path.join(ROOT, 'bin', 'machsampler.js')
  // A link to a file in another directory.
  fs.mkdirSync(path.join(dir, 'real'))
  fs.writeFileSync(path.join(dir, 'real', 'out.collapsed'), 'old\n')
  fs.symlinkSync(path.join('real', 'out.collapsed'), path.join(dir, 'out.collapsed'))
  let r = spawnSync(process.execPath, [cli, 'record', '-q', '--interval', '1', '-o', path.join(dir, 'out.collapsed'), '--', process.execPath, prog], { encoding: 'utf8' })
  if (r.status !== 0) problems.push(`record to a link: status ${r.status}: ${r.stderr.trim()}`)
  if (!fs.lstatSync(path.join(dir, 'out.collapsed')).isSymbolicLink()) problems.push('the link was replaced by a file')
  if (!/ \d+$/m.test(fs.readFileSync(path.join(dir, 'real', 'out.collapsed'), 'utf8'))) problems.push('the file the link names was not written')
  // A link to this process's stdout (as /dev/stdout is): the profile
  // arrives on the pipe, and the link stays.
  fs.symlinkSync('/proc/self/fd/1', path.join(dir, 'stdout'))
  r = spawnSync(process.execPath, [cli, 'record', '-q', '--interval', '1', '--format', 'collapsed', '-o', path.join(dir, 'stdout'), '--', process.execPath, prog], { encoding: 'utf8' })
  if (r.status !== 0) problems.push(`record to a stdout link: status ${r.status}: ${r.stderr.trim()}`)
  if (!/ \d+$/m.test(r.stdout)) problems.push(`nothing arrived on stdout (${JSON.stringify(r.stdout.slice(0, 80))})`)
  if (!fs.lstatSync(path.join(dir, 'stdout')).isSymbolicLink()) problems.push('the stdout link was replaced by a file')
  // /dev/stdout itself, as root: in a private mount namespace with a
  // private /dev, so a build that replaces it cannot harm this machine's.
  if (process.getuid() === 0 && spawnSync('unshare', ['--mount', 'true']).status === 0) {
    const fakeDev = path.join(dir, 'dev')
    fs.mkdirSync(fakeDev)
    const script = [
      'set -e',
      'mount --make-rprivate /',
      `for d in null zero urandom random tty; do cp -a /dev/$d ${fakeDev}/; done`,
      `ln -s /proc/self/fd/0 ${fakeDev}/stdin; ln -s /proc/self/fd/1 ${fakeDev}/stdout; ln -s /proc/self/fd/2 ${fakeDev}/stderr`,
      `mount --bind ${fakeDev} /dev`,
      `"$0" ${JSON.stringify(cli)} record -q --interval 1 --format collapsed -o /dev/stdout -- "$0" ${JSON.stringify(prog)}`,
      `test -L /dev/stdout || echo 'DEV-STDOUT-REPLACED' >&2`,
    ].join('\n')
    r = spawnSync('unshare', ['--mount', 'sh', '-c', script, process.execPath], { encoding: 'utf8' })
    if (!/ \d+$/m.test(r.stdout)) problems.push(`nothing arrived through /dev/stdout (${r.stderr.trim().slice(0, 200)})`)
    if (/DEV-STDOUT-REPLACED/.test(r.stderr)) problems.push('/dev/stdout was replaced by a file')
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
verdict(problems.length > 0, problems.length ? problems.join('; ') : 'links written through, stdout streamed to, links kept')
