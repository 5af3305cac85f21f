// machsampler: native stack sampler for every thread of a Node.js or
// Electron process. The functions and types below come from the native
// addon; their documentation is in ./binding.d.ts.
export {
  start,
  stop,
  stats,
  isRunning,
  threadCount,
  setNativeUnwinding,
  getNativeUnwinding,
  symbolicate,
  SymbolOptions,
  StartOptions,
  StopOptions,
  Stats,
  Profile,
  ThreadInfo,
  SampleTable,
  StackTable,
  FrameTable,
  ModuleInfo,
  ProfileMeta,
  SymbolTable,
  FunctionTable,
} from './binding'

// Files, formats and reports (see ./binding.d.ts).
export {
  exportProfile,
  saveProfile,
  loadProfile,
  formatFromPath,
  parseFormatName,
  profileReport,
  formats,
  FormatInfo,
  ExportOptions,
  ReportOptions,
  ProfileReport,
  ReportThread,
  ReportFunction,
  ReportPath,
} from './binding'

// Stalls of an event loop (see watchStalls below).
export { WatchStallsOptions, Stall, StallWatcherStats } from './binding'

import type { Profile, StartOptions, SymbolOptions, WatchStallsOptions, StallWatcherStats } from './binding'

/** A running {@link watchStalls}. */
export interface StallWatcher {
  /** Stops watching. A stall not yet handed to `onStall` is dropped, and none is reported after. Idempotent. */
  close(): void
  /** Counters of this watcher, and of the sample history all watchers of the process share. */
  stats(): StallWatcherStats
}

/**
 * Watches the calling thread's event loop for stalls: times it does not turn for
 * `thresholdMs` or longer. Each stall goes to `options.onStall` on this thread once the
 * loop turns again, as `{ thread, startTimeNs, durationMs, profile, summary }`: a
 * symbolicated profile of every thread from `keepMs` before the stall to its end, and a
 * few lines naming the stalled thread's dominant stack (JavaScript and native frames)
 * and the other busy threads.
 *
 * - Detection needs no JavaScript during the stall: native libuv handles on the loop beat
 *   a heartbeat on every turn; the sampler thread notices when it stops, and samples the
 *   stalled thread faster (`stallIntervalMs`) until it turns.
 * - Called on the main thread it watches the main thread; a worker watches its own loop by
 *   calling it. It runs alongside `start()`/`stop()`: while a session runs, the watcher sees
 *   what the session samples, and the session's profile is unchanged.
 * - History is a bounded ring: memory follows `keepMs` and the sample rate, not how long
 *   the watcher runs.
 * - A stall in progress when the process exits is handed to `onStall` from `'exit'`. A stall
 *   that never ends (a deadlock) can be written out with `hangAfterMs` and `hangDir`.
 * - An exception thrown by `onStall` is an uncaught exception of this thread (at exit, it
 *   is written to stderr instead, so the exit code stays the program's).
 *
 * @throws `EINVAL` for a bad option (the message names the range); `ENOENT`, `ENOTDIR`,
 *   `EACCES` or `EROFS` if `hangDir` is missing, not a directory or not writable.
 */
export declare function watchStalls(options: WatchStallsOptions): StallWatcher

/** Options of {@link fetchSymbols}: where to look, and how long to wait. */
export interface FetchSymbolsOptions extends SymbolOptions {
  /** Timeout of each request (no answer within it, or a body slower than 1 KiB/s over it), ms: 1 to 600000. Default 20000. */
  timeoutMs?: number
}

/** What {@link fetchSymbols} did. Server problems are reported here, never thrown. */
export interface FetchSymbolsResult {
  /** Symbol files asked for (not yet in the download cache). */
  requested: number
  downloaded: number
  /** Files the servers do not have (404; not asked again for a day). */
  missing: number
  /** Downloads that failed: unreachable server, timeout, HTTP error, not a symbol file. */
  failed: { url: string; module: string; reason: string }[]
  /** Servers that could not be reached (each asked once per call). */
  unreachable: string[]
  /** One line per problem, for a person. */
  messages: string[]
}

/**
 * Downloads, from the symbol servers on the symbol path (`options.symbolPath`,
 * default `MACHSAMPLER_SYMBOL_PATH`), the Breakpad symbol files of the modules
 * the profile's frames are in, into the download cache, for
 * `symbolicate(profile, options)` to use. The only function that uses the
 * network; symbolicate() and stop() never do. Resolves even when servers
 * fail, saying what failed.
 *
 * The promise rejects with `EINVAL` for a bad profile or option.
 */
export declare function fetchSymbols(profile: Profile, options?: FetchSymbolsOptions): Promise<FetchSymbolsResult>

/**
 * Options of {@link withProfiler} and {@link profile}: those of `start()`
 * plus what to do with the profile.
 */
export interface ProfilerOptions extends StartOptions {
  /** Name the frames (see `symbolicate`) before returning. Default true. */
  symbolicate?: boolean
  /** Also save the profile to this file, atomically; the extension picks the format. */
  output?: string
  /** The format for `output`, whatever its extension (see `exportProfile`). */
  format?: string
}

/** What {@link withProfiler} returns. */
export interface Profiled<T> {
  /** What the function returned (awaited, for an async function). */
  result: T
  profile: Profile
}

/**
 * Runs `fn` with the sampler on: starts, calls `fn`, and stops in `finally`. For an async function (one
 * returning a promise) the sampler stops when the promise settles, and a
 * promise is returned.
 *
 * If `fn` throws or rejects, the sampler is stopped (and the profile saved
 * to `options.output`, if given) and the error is passed on unchanged.
 *
 * @throws `EINVAL` for bad options; `EAGAIN` if the sampler is already running;
 *   `ENOENT`, `EACCES`, `EISDIR`, `ENOTDIR`, `EROFS` or `ENOSPC` if `options.output`
 *   cannot be written (checked before `fn` runs).
 */
export declare function withProfiler<T>(fn: () => Promise<T>, options?: ProfilerOptions): Promise<Profiled<T>>
export declare function withProfiler<T>(fn: () => T, options?: ProfilerOptions): Profiled<T>

/** Options of {@link profile}. */
export interface ProfileFunctionOptions extends ProfilerOptions {
  /** Called with the profile of each call, after the sampler stopped. */
  onProfile?: (profile: Profile) => void
}

/**
 * Wraps `fn` so that each call is profiled. The wrapper returns what `fn` returns (a
 * promise stays a promise); each call's profile goes to
 * `options.onProfile` and/or is saved to `options.output`. Calls must not
 * overlap: the sampler is process-wide (an overlapping call throws `EAGAIN`;
 * for a native `async` function its promise rejects with it, as with any
 * error starting the sampler).
 *
 * @throws `EINVAL` for bad options; `ENOENT`, `EACCES`, `EISDIR`, `ENOTDIR`, `EROFS` or
 *   `ENOSPC` if `options.output` cannot be written (checked when wrapping).
 */
export declare function profile<A extends unknown[], R>(
  fn: (...args: A) => R,
  options?: ProfileFunctionOptions,
): (...args: A) => R
