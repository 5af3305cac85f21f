'use strict'
// Help texts. The format table comes from the addon, the one place it is
// kept.

function formatsHelp() {
  // Loaded here, not at the top: --help and --version work without the
  // addon (a platform without a build gets its reason from the commands).
  let formats
  try {
    formats = require('../addon.js').api.formats()
  } catch {
    return 'Formats: listed when the native addon loads.'
  }
  const rows = formats.map((f) => {
    const names = [f.name, ...f.aliases].join(', ')
    const left = `${f.extensions.join(', ')} (${names})`
    return `  ${left.padEnd(34)}  ${f.description}`
  })
  return ['Formats, by extension or --format:', ...rows].join('\n')
}

const USAGE = () => `Usage: machsampler <command> [options]

Samples the native stacks of every thread of a Node.js program: the main
thread, worker_threads, libuv's pool, V8's helpers and other addons.

Commands:
  record [options] -- <command> [args...]  run a Node.js program and profile it
  report <profile> [options]               hot functions and call paths
  convert <profile> -o <file> [options]    write a profile in another format

Run 'machsampler <command> --help' for a command's options.

${formatsHelp()}
`

const COMMANDS = {
  record: () => `Usage: machsampler record [options] -- <command> [args...]

Runs <command>, a Node.js program (for example: node app.js, npx tsc,
npm run build), with the sampler preloaded through NODE_OPTIONS, and writes
the profile when it exits: normally, by process.exit(), an uncaught
exception, SIGINT, SIGTERM or SIGHUP. Prints a summary on stderr.

Every Node.js process the command starts is profiled (npx, npm run, shell
scripts, child_process fork/spawn/exec of node, and their children): they
inherit the preload. .machprof and Firefox files hold all of them; other
formats get one file per process, <stem>.<pid>.<ext>. Programs that are not
Node.js are left alone and listed.

Options:
  -o, --output <file>   the profile to write; its extension picks the format
                        (default: machsampler-<date>-<time>.html here)
  -f, --format <name>   the format, whatever the extension
      --interval <ms>   sampling interval: an integer from 1 to 1000 (default 10)
      --mode <cpu|wall> cpu (default): threads are sampled for the CPU time
                        they use; wall: every thread every interval, waiting
                        ones too (marked idle), to see where threads block
      --buffer <rows>   sample buffer capacity (default 1000000)
      --depth <n>       frames kept per stack: 1 to 1024 (default 512)
      --duration <s>    stop sampling after <s> seconds (the program runs on;
                        the profile is written when it ends)
      --checkpoint <s>  each process keeps its profile so far every <s>
                        seconds (default 10; 0: only at SIGINT, SIGTERM and
                        SIGHUP), for one killed before it can write it
      --no-jit-names    do not name JavaScript frames (they stay 0x...)
      --no-inline       do not split out functions that optimized code
                        inlined (when the command is node, record adds
                        --log-code and a --logfile in a private directory
                        so that V8 says which; this turns that off)
      --perf-map        also name them from V8's perf map (adds
                        --perf-basic-prof-only-functions to the program)
      --idle            count idle samples in the summary and flame graphs
      --no-follow       profile only the first Node.js process; its children
                        do not inherit the preload
      --view <name>     mixed (default): every frame; js: runtime internals
                        (V8, Node, libc) folded into the calling JavaScript
                        function, as --cpu-prof shows time, addons' native
                        frames kept; native: native frames only
      --stalls <ms>     also watch the main thread's event loop: each time it
                        does not turn for <ms> (20 to 60000), write the seconds
                        before and the stall, every thread, to
                        <output>-stall-<n>.<ext> and print its summary; a stall
                        that lasts 10 s (or twice <ms>, if longer) is also
                        written as <output>-hang-<n> while it lasts (a
                        deadlock never ends)
      --symbol-path <list>  symbol directories and symbol servers, separated
                        by ';' (default: MACHSAMPLER_SYMBOL_PATH): dSYM bundles,
                        Breakpad .sym files, ELF debug files, and https://
                        servers in the Breakpad layout (files are downloaded
                        into the cache after the program exits)
  -q, --quiet           no summary, and no live "recording…" line (for programs
                        that prompt on the terminal)
  -h, --help            this help

Exit status: the program's own (128+n if it died of signal n); if no
profile could be written, the program's if it failed, else 1; 2 for bad
usage; 126 or 127 if the command could not be run.

${formatsHelp()}
`,
  report: () => `Usage: machsampler report <profile.machprof> [options]

Prints the threads (where the time went, per thread, first), the hottest
functions and the hottest call paths of a profile, and what the profiler
cost. Idle samples are left out unless --idle is given.

Options:
      --thread <which>     only these threads: a role (main, worker, pool,
                           'V8 worker', inspector, …), a name (all threads
                           with it) or a tid, as the threads table shows them
      --top <n>            rows per table (default 15)
      --by <self|total>    sort functions by self or total samples (default self)
      --idle               count idle samples too
      --view <name>        mixed (default): every frame; js: runtime internals
                           (V8, Node, libc) folded into the calling JavaScript
                           function, as --cpu-prof shows time, addons' native
                           frames kept; native: native frames only
      --symbol-path <list>  symbol directories and symbol servers, separated
                        by ';' (default: MACHSAMPLER_SYMBOL_PATH): dSYM bundles,
                        Breakpad .sym files, ELF debug files, and https://
                        servers in the Breakpad layout (files are downloaded
                        into the cache after the program exits)
  -h, --help               this help
`,
  convert: () => `Usage: machsampler convert <profile.machprof> -o <file> [options]

Writes a .machprof profile in another format (or again as .machprof).

Options:
  -o, --output <file>   the file to write; its extension picks the format
  -f, --format <name>   the format, whatever the extension
      --idle            keep idle samples in flame graphs and collapsed stacks
      --no-thread-prefix  merge threads in flame graphs and collapsed stacks
      --view <name>     mixed (default): every frame; js: runtime internals
                        (V8, Node, libc) folded into the calling JavaScript
                        function, as --cpu-prof shows time, addons' native
                        frames kept; native: native frames only
      --symbol-path <list>  symbol directories and symbol servers, separated
                        by ';' (default: MACHSAMPLER_SYMBOL_PATH): dSYM bundles,
                        Breakpad .sym files, ELF debug files, and https://
                        servers in the Breakpad layout (files are downloaded
                        into the cache after the program exits)
  -h, --help            this help

${formatsHelp()}
`,
}

/** Prints the help of `command`, or the overview; exit status 0. */
function help(command) {
  process.stdout.write(COMMANDS[command] ? COMMANDS[command]() : USAGE())
  return 0
}

module.exports = { help, usage: USAGE, hasHelp: (command) => Boolean(COMMANDS[command]) }
