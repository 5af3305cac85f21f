'use strict'
// The public entry point: assembles the exports. The addon is loaded and
// checked in lib/addon.js; start()/stop() sugar is in lib/sugar.js. Worker
// threads need nothing: the addon finds their V8 isolates itself
// (src/v8/discover.rs).

const { api, arity } = require('./lib/addon.js')
const sugar = require('./lib/sugar.js')
const { fetchSymbols } = require('./lib/symbol-fetch.js')
const { watchStalls } = require('./lib/stalls.js')

module.exports = {
  ...api,
  withProfiler: arity('withProfiler', sugar.withProfiler, 2),
  profile: arity('profile', sugar.profile, 2),
  fetchSymbols: arity('fetchSymbols', fetchSymbols, 2),
  watchStalls: arity('watchStalls', watchStalls, 1),
}
