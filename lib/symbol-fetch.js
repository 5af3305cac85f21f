'use strict'
// Downloads symbol files from the symbol servers on the symbol path into
// the download cache, where symbolicate() reads them. This is the only
// code that touches the network, and it runs only when asked: through
// fetchSymbols(), or in the CLI after the profiled program has exited.
// symbolicate() and stop() never download.
//
// Node's own http/https do the work (no TLS stack in the addon). Each
// request has a timeout: no answer within it, or a body that comes slower
// than 1 KiB/s over any such period (a server that trickles), ends it; a
// server that cannot be reached is not asked
// again in the same call; a 404 is remembered for a day (a `.404` file
// beside where the symbol file would go), so a module a server does not
// have is not asked for on every run. A file that is not a Breakpad
// symbol file (an HTML error page, a truncated body) is not kept. Every
// failure leaves those names unknown and is reported once, in the result.

const fs = require('fs')
const path = require('path')
const { symbolDownloads, codedError } = require('./addon.js')

const DEFAULT_TIMEOUT_MS = 20000
const MISSING_FOR_MS = 24 * 3600 * 1000
const PARALLEL = 4
const MAX_REDIRECTS = 5
const MAX_BYTES = 2 * 1024 * 1024 * 1024
/** The slowest body kept going, bytes per second. */
const MIN_BYTES_PER_S = 1024

function origin(url) {
  try {
    return new URL(url).origin
  } catch {
    return url
  }
}

/** GET `url` into `file` (atomically). Resolves to 'ok' | 'missing'; rejects with a reason. */
function download(url, file, timeoutMs, redirects = 0) {
  return new Promise((resolve, reject) => {
    let u
    try {
      u = new URL(url)
    } catch {
      reject(new Error(`bad URL ${url}`))
      return
    }
    const client = u.protocol === 'https:' ? require('https') : u.protocol === 'http:' ? require('http') : null
    if (!client) {
      reject(new Error(`unsupported protocol in ${url}`))
      return
    }
    const req = client.get(u, { timeout: timeoutMs, headers: { 'user-agent': 'machsampler' } }, (res) => {
      const status = res.statusCode
      if (status >= 300 && status < 400 && res.headers.location) {
        res.resume()
        if (redirects >= MAX_REDIRECTS) {
          reject(new Error(`too many redirects from ${url}`))
          return
        }
        const next = new URL(res.headers.location, u).toString()
        download(next, file, timeoutMs, redirects + 1).then(resolve, reject)
        return
      }
      if (status === 404 || status === 403 || status === 410) {
        res.resume()
        resolve('missing')
        return
      }
      if (status !== 200) {
        res.resume()
        reject(new Error(`HTTP ${status}`))
        return
      }
      fs.mkdirSync(path.dirname(file), { recursive: true })
      const tmp = `${file}.${process.pid}.${Date.now()}.part`
      const out = fs.createWriteStream(tmp)
      let bytes = 0
      let head = Buffer.alloc(0)
      // Bytes that came in the current period of timeoutMs.
      let lately = 0
      const floor = Math.ceil((MIN_BYTES_PER_S * timeoutMs) / 1000)
      const slow = setInterval(() => {
        if (lately < floor) fail(new Error(`too slow: ${lately} bytes in ${timeoutMs} ms`))
        lately = 0
      }, timeoutMs)
      // The first failure is the reason: destroying the response can
      // report it closed early, from inside res.destroy().
      let failed = false
      const fail = (e) => {
        if (failed) return
        failed = true
        clearInterval(slow)
        res.destroy()
        out.destroy()
        fs.rm(tmp, { force: true }, () => reject(e))
      }
      res.on('data', (chunk) => {
        lately += chunk.length
        bytes += chunk.length
        if (head.length < 7) head = Buffer.concat([head, chunk.subarray(0, 7)])
        if (bytes > MAX_BYTES) fail(new Error('larger than 2 GiB'))
      })
      res.on('error', fail)
      res.on('aborted', () => fail(new Error('connection closed early')))
      res.pipe(out)
      out.on('error', fail)
      out.on('finish', () => {
        clearInterval(slow)
        if (!res.complete) return fail(new Error('connection closed early'))
        if (head.subarray(0, 7).toString('latin1') !== 'MODULE ') return fail(new Error('not a Breakpad symbol file'))
        fs.rename(tmp, file, (e) => (e ? fail(e) : resolve('ok')))
      })
    })
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)))
    req.on('error', reject)
  })
}

function missingRecently(file) {
  try {
    return Date.now() - fs.statSync(`${file}.404`).mtimeMs < MISSING_FOR_MS
  } catch {
    return false
  }
}

/**
 * Downloads `list` ([{ url, file, module }], from symbolDownloads).
 * `progress(done, total)` is called as files finish. Resolves to
 * `{ downloaded, missing, failed: [{ url, module, reason }], unreachable: [origin] }`.
 */
async function downloadAll(list, { timeoutMs = DEFAULT_TIMEOUT_MS, progress } = {}) {
  const result = { downloaded: 0, missing: 0, failed: [], unreachable: [] }
  const down = new Set()
  let done = 0
  let next = 0
  const work = async () => {
    while (next < list.length) {
      const d = list[next++]
      const server = origin(d.url)
      if (down.has(server)) {
        result.failed.push({ url: d.url, module: d.module, reason: 'server unreachable' })
      } else if (missingRecently(d.file)) {
        result.missing++
      } else {
        try {
          const r = await download(d.url, d.file, timeoutMs)
          if (r === 'ok') result.downloaded++
          else {
            result.missing++
            try {
              fs.mkdirSync(path.dirname(d.file), { recursive: true })
              fs.writeFileSync(`${d.file}.404`, '')
            } catch {
              // The cache is not writable: it will be asked again next time.
            }
          }
        } catch (e) {
          const reason = e.code || e.message
          if (['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN'].includes(e.code) || /no answer within/.test(e.message)) {
            if (!down.has(server)) result.unreachable.push(`${server} (${reason})`)
            down.add(server)
          }
          result.failed.push({ url: d.url, module: d.module, reason })
        }
      }
      done++
      if (progress) progress(done, list.length)
    }
  }
  await Promise.all(Array.from({ length: Math.min(PARALLEL, list.length) }, work))
  return result
}

/** One line per problem, for a person: what stays unknown and why. */
function describe(result) {
  const lines = result.unreachable.map((s) => `symbol server ${s} could not be reached; names it has stay unknown`)
  const other = result.failed.filter((f) => f.reason !== 'server unreachable' && !result.unreachable.some((u) => u.startsWith(origin(f.url))))
  for (const f of other) lines.push(`cannot download ${f.url}: ${f.reason}; ${path.basename(f.module)} names stay unknown`)
  return lines
}

/**
 * fetchSymbols(profile, options?): downloads, from the symbol servers on
 * the symbol path, the symbol files for the modules a profile's frames are
 * in, into the download cache. Then symbolicate(profile, options) uses
 * them. Never fails on a server problem: resolves to what happened.
 */
async function fetchSymbols(profile, options = {}) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw codedError('EINVAL', 'options must be an object')
  }
  const { timeoutMs, ...symbolOptions } = options
  if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs >= 1 && timeoutMs <= 600000)) {
    throw codedError('EINVAL', 'options.timeoutMs must be an integer from 1 to 600000')
  }
  const list = symbolDownloads(profile, symbolOptions)
  const result = await downloadAll(list, { timeoutMs })
  return { requested: list.length, ...result, messages: describe(result) }
}

module.exports = { fetchSymbols, downloadAll, describe, DEFAULT_TIMEOUT_MS }
