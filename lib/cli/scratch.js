'use strict'
// Scratch directories of CLI runs, under the system's temporary directory.
//
// Each holds an `owner` file with the pid of the CLI that made it. The CLI
// removes its directory when it ends; one killed with SIGKILL cannot, so the
// next run removes directories whose owner is gone. A directory whose owner
// cannot be told (no file yet, another user's) is left alone.

const fs = require('fs')
const os = require('os')
const path = require('path')

const PREFIX = 'machsampler-'
const OWNER = 'owner'

/** A new scratch directory, after removing those left by killed runs. */
function scratchDir() {
  removeOrphans()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), PREFIX))
  fs.writeFileSync(path.join(dir, OWNER), `${process.pid}\n`)
  return dir
}

function removeOrphans() {
  let names
  try {
    names = fs.readdirSync(os.tmpdir())
  } catch {
    return
  }
  for (const name of names) {
    // mkdtemp's six characters: no other file of ours matches.
    if (!/^machsampler-[A-Za-z0-9]{6}$/.test(name)) continue
    const dir = path.join(os.tmpdir(), name)
    let pid
    try {
      pid = Number(fs.readFileSync(path.join(dir, OWNER), 'utf8'))
    } catch {
      continue
    }
    if (!Number.isSafeInteger(pid) || pid <= 0 || alive(pid)) continue
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return e.code !== 'ESRCH'
  }
}

module.exports = { scratchDir }
