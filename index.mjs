// ES module entry: the same single instance as index.js (the CommonJS
// entry), re-exported by name so `import { start, stop } from 'machsampler'`
// works.
import machsampler from './index.js'

export const {
  start,
  stop,
  stats,
  isRunning,
  threadCount,
  setNativeUnwinding,
  getNativeUnwinding,
  symbolicate,
  exportProfile,
  saveProfile,
  loadProfile,
  formatFromPath,
  parseFormatName,
  profileReport,
  formats,
  withProfiler,
  profile,
  fetchSymbols,
  watchStalls,
} = machsampler
export default machsampler
