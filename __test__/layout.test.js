'use strict'
// The shape of the JavaScript side: one module loads the addon, no module
// requires itself back through another, and the three export lists
// (index.js, index.mjs, index.d.ts) agree.
const { execFileSync } = require('child_process')
const fs = require('fs')
const path = require('path')

const ROOT = path.join(__dirname, '..')

/** Every .js file of the package's JavaScript, relative to ROOT. */
function productFiles() {
  const out = ['index.js', 'register.js']
  const walk = (dir) => {
    for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
      const rel = path.join(dir, e.name)
      if (e.isDirectory()) walk(rel)
      else if (e.name.endsWith('.js')) out.push(rel)
    }
  }
  walk('lib')
  walk('bin')
  return out
}

/** The package files `file` requires with a relative path (resolved). */
function localRequires(file) {
  const src = fs.readFileSync(path.join(ROOT, file), 'utf8')
  const out = []
  for (const m of src.matchAll(/require\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g)) {
    let target = path.normalize(path.join(path.dirname(file), m[1]))
    if (!target.endsWith('.js') && !target.endsWith('.json')) {
      target = fs.existsSync(path.join(ROOT, target + '.js')) ? target + '.js' : path.join(target, 'index.js')
    }
    out.push(target)
  }
  return out
}

test('only lib/addon.js loads the native binding', () => {
  const loaders = productFiles().filter((f) => localRequires(f).includes('binding.js'))
  expect(loaders).toEqual([path.join('lib', 'addon.js')])
})

test('the package modules have no require cycle', () => {
  const graph = new Map(productFiles().map((f) => [f, localRequires(f).filter((t) => t.endsWith('.js'))]))
  const state = new Map()
  const cycles = []
  const visit = (f, trail) => {
    if (state.get(f) === 'done') return
    if (state.get(f) === 'open') {
      cycles.push([...trail.slice(trail.indexOf(f)), f].join(' -> '))
      return
    }
    state.set(f, 'open')
    for (const t of graph.get(f) || []) visit(t, [...trail, f])
    state.set(f, 'done')
  }
  for (const f of graph.keys()) visit(f, [])
  expect(cycles).toEqual([])
})

test('index.js, index.mjs and index.d.ts export the same functions', () => {
  const cjs = Object.keys(require('..')).sort()
  // jest cannot import ES modules in-process; a plain node can.
  const esmScript = `import * as m from ${JSON.stringify(path.join(ROOT, 'index.mjs'))}; console.log(JSON.stringify(Object.keys(m)))`
  const esm = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', esmScript], { encoding: 'utf8' }))
    .filter((k) => k !== 'default')
    .sort()
  const dts = fs.readFileSync(path.join(ROOT, 'index.d.ts'), 'utf8')
  const bindingDts = fs.readFileSync(path.join(ROOT, 'binding.d.ts'), 'utf8')
  // Names index.d.ts exports that are functions: declared there, or
  // re-exported from binding.d.ts where they are declared functions.
  const declared = new Set([...bindingDts.matchAll(/export declare function (\w+)/g)].map((m) => m[1]))
  for (const m of dts.matchAll(/export declare function (\w+)/g)) declared.add(m[1])
  const exported = new Set()
  for (const block of dts.matchAll(/export \{([^}]*)\} from/g)) {
    for (const name of block[1].split(',').map((s) => s.trim()).filter(Boolean)) exported.add(name)
  }
  for (const m of dts.matchAll(/export declare function (\w+)/g)) exported.add(m[1])
  const dtsFunctions = [...exported].filter((n) => declared.has(n)).sort()
  expect(esm).toEqual(cjs)
  expect(dtsFunctions).toEqual(cjs)
})

test('the committed binding.d.ts declares no test entry points', () => {
  const bindingDts = fs.readFileSync(path.join(ROOT, 'binding.d.ts'), 'utf8')
  const internal = [...bindingDts.matchAll(/export declare function (_\w+)/g)].map((m) => m[1])
  expect(internal).toEqual([])
})
