'use strict'
// Source maps of scripts compiled in memory.
//
// A TypeScript or JSX loader (ts-node, tsx for CommonJS, @babel/register,
// esbuild-register) reads a .ts file, transpiles it, and hands the
// JavaScript, its map inline, to Module.prototype._compile; test runners
// (jest, vitest) do the same through the vm module. The map is nowhere on
// disk. These hooks note such maps with the addon, on every thread that
// loads it, so symbolization in this process shows those functions at
// their .ts lines. Text that is the file's own is left alone: its map, if
// any, is read from the file. The hooks only look at the text: what the
// hooked function does, returns and throws is unchanged.

const fs = require('fs')

const HOOKED = Symbol.for('machsampler.compileHook')
const COMMENT = /^\s*\/\/[#@]\s*sourceMappingURL=(data:\S+)\s*$/

/** Hooks the compiling functions once per thread, whatever loads it. */
function install(binding) {
  if (typeof binding.noteSourceMap !== 'function') return
  const Module = require('module')
  wrap(Module.prototype, '_compile', (args) => note(binding, args[0], args[1]))
  const vm = require('vm')
  // (code, filename) or (code, { filename }).
  const named = (args, at) => note(binding, args[0], typeof args[at] === 'string' ? args[at] : args[at] && args[at].filename)
  wrap(vm, 'runInThisContext', (args) => named(args, 1))
  wrap(vm, 'runInContext', (args) => named(args, 2))
  wrap(vm, 'runInNewContext', (args) => named(args, 2))
  wrap(vm, 'compileFunction', (args) => named(args, 2))
  // A class: a Proxy keeps `instanceof`, subclassing and its statics.
  const Script = vm.Script
  if (typeof Script === 'function' && !Script[HOOKED]) {
    vm.Script = new Proxy(Script, {
      construct(target, args, newTarget) {
        quietly(() => named(args, 1))
        return Reflect.construct(target, args, newTarget)
      },
      get(target, key, receiver) {
        return key === HOOKED ? true : Reflect.get(target, key, receiver)
      },
    })
  }
}

/** Runs `f`; what it throws (an options getter, a bad map) is dropped. */
function quietly(f) {
  try {
    f()
  } catch {
    // Names at compiled positions: never a failed compile.
  }
}

/** Replaces `owner[key]` by a function that calls `look(args)` first. */
function wrap(owner, key, look) {
  const original = owner[key]
  if (typeof original !== 'function' || original[HOOKED]) return
  // By this name the naming of JavaScript frames leaves this frame out of
  // stacks (src/v8/resolve.rs): the program runs the same without it.
  const machsamplerNotesSourceMap = function (...args) {
    quietly(() => look(args))
    return Reflect.apply(original, this, args)
  }
  Object.defineProperty(machsamplerNotesSourceMap, HOOKED, { value: true })
  Object.defineProperty(machsamplerNotesSourceMap, 'name', { value: original.name })
  Object.defineProperty(machsamplerNotesSourceMap, 'length', { value: original.length })
  owner[key] = machsamplerNotesSourceMap
}

function note(binding, content, filename) {
  if (typeof content !== 'string' || typeof filename !== 'string' || !filename.startsWith('/')) return
  const at = content.lastIndexOf('sourceMappingURL=data:')
  if (at < 0) return
  const start = content.lastIndexOf('\n', at) + 1
  const end = content.indexOf('\n', at)
  const m = COMMENT.exec(content.slice(start, end < 0 ? content.length : end))
  if (!m) return
  // The file's own text (Node's loader, a bundle with an inline map): read
  // from the file when frames are named.
  let size = -1
  try {
    size = fs.statSync(filename).size
  } catch {
    // A module with no file: its map is all there is.
  }
  if (size === Buffer.byteLength(content)) return
  binding.noteSourceMap(filename, m[1])
}

module.exports = { install }
