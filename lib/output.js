'use strict'
// Whether an output file can be written, found before the work that
// produces it (a recording, a profiled function), with the message the
// write itself would give.

const fs = require('fs')
const path = require('path')

function failure(file, code, why) {
  return Object.assign(new Error(`cannot write '${file}': ${why}`), { code })
}

/**
 * Fails early, with the same message the write would give, if `file`
 * cannot be created: probes its directory with a temporary file.
 */
function checkWritable(file) {
  // Not path.resolve(): it folds `missing/..` away, which the system does
  // not when the file is written.
  const abs = path.isAbsolute(file) ? file : `${process.cwd()}${path.sep}${file}`
  let st = null
  try {
    st = fs.statSync(abs)
  } catch {
    // Does not exist yet: the usual case.
  }
  if (st && st.isDirectory()) throw failure(file, 'EISDIR', 'is a directory')
  if (st && !st.isFile()) {
    // A pipe or a terminal (/dev/stdout): written as a stream.
    try {
      fs.accessSync(abs, fs.constants.W_OK)
      return
    } catch (e) {
      throw failure(file, e.code, e.code === 'EACCES' ? 'permission denied' : e.message)
    }
  }
  // Through symbolic links, the file written is the one they end at.
  const probe = `${path.dirname(finalPath(abs))}${path.sep}.machsampler-probe-${process.pid}-${Date.now()}`
  try {
    fs.closeSync(fs.openSync(probe, 'wx'))
    fs.unlinkSync(probe)
  } catch (e) {
    const why =
      {
        ENOENT: 'no such directory',
        EACCES: 'permission denied',
        EPERM: 'permission denied',
        EROFS: 'read-only file system',
        ENOTDIR: 'a component of the path is not a directory',
        ENOSPC: 'no space left on device',
      }[e.code] || e.message
    throw failure(file, e.code, why)
  }
}

/** Where a chain of symbolic links ends (the file may not exist yet). */
function finalPath(p) {
  for (let i = 0; i < 40; i++) {
    let link
    try {
      link = fs.readlinkSync(p)
    } catch {
      return p
    }
    p = path.resolve(path.dirname(p), link)
  }
  return p
}

module.exports = { checkWritable }
