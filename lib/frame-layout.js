'use strict'
// After start(): V8's layout of interpreted frames learned from this
// thread's own stack (src/v8/frames.rs, learn_layout_from_own_stack), so
// the signal handler reads interpreted frames' positions from the frames
// from the first sample, instead of calling V8's stack walk in every
// sample until enough interpreted frames have been sampled.

// Frames of one function on the stack, all interpreted (a function runs in
// V8's interpreter for its first calls): more than the 64 that must agree.
const DEPTH = 200
// Tries per process: a function V8 has compiled by now gives no interpreted
// frames, so trying again is pointless.
const MAX_TRIES = 3
let tries = 0

// Named for what it is: a profile that catches it shows machsampler at work.
function machsamplerLearnsFrameLayout(n, learn) {
  return n > 0 ? machsamplerLearnsFrameLayout(n - 1, learn) : learn()
}

/** Learns the layout once JS names are on; never throws. */
function learnFrameLayout(binding, options) {
  if (tries >= MAX_TRIES || typeof binding.learnJsFrameLayout !== 'function') return
  try {
    // A getter may answer differently from when start() read it.
    if (options != null && typeof options === 'object' && options.jsNames === false) return
    tries++
    if (machsamplerLearnsFrameLayout(DEPTH, binding.learnJsFrameLayout)) tries = MAX_TRIES
  } catch {
    // Out of stack in a deeply nested caller, or a throwing getter:
    // sampling learns the layout instead.
  }
}

module.exports = { learnFrameLayout }
