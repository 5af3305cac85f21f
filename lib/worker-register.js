'use strict'
// Preloaded into worker_threads created after machsampler was loaded (see
// hookWorkers in index.js): loading the addon in the worker registers the
// worker's V8 isolate, so its JavaScript frames get names. It starts and
// stops nothing.
require('../index.js')
