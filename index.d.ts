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
  StartOptions,
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
