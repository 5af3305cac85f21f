'use strict'
// Preloaded into worker_threads created after machsampler was loaded (see
// lib/workers.js): loading the addon in the worker registers the worker's
// V8 isolate, so its JavaScript frames get names; workers it creates get
// the same preload. It starts and stops nothing.
require('./addon.js')
require('./workers.js').hookWorkers()
