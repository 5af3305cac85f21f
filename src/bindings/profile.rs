//! The `Profile` object: `ProfileData` as JS typed arrays, both ways.
//!
//! Out (`stop()`): columns are copied into V8-owned ArrayBuffers
//! (`*Slice::copy_from`), which Electron's memory cage requires.
//! In (`symbolicate`, `exportProfile`, a profile read back from a file):
//! every field is type-checked and every index validated, so a malformed
//! object is an EINVAL naming the field, never a crash.

use napi::bindgen_prelude::*;
use napi::{Env, JsValue, ValueType};
use napi_derive::napi;

use super::{einval, napi_fail, JsResult, JsStats};
use crate::profile::StatsSnapshot;
use crate::profile::ThreadRecord;
use crate::profile::{Function, FunctionKind, Meta, Module, ProfileData, Symbols};

/// Layout version of the `Profile` object. Bumped when fields change meaning.
pub const PROFILE_VERSION: u32 = 1;

/// A thread that appears in a profile.
#[napi(object, js_name = "ThreadInfo")]
pub struct JsThreadInfo {
    /// OS thread id (Linux tid; macOS `pthread_threadid_np`).
    pub tid: f64,
    /// Thread name as the OS reports it (may be empty).
    pub name: String,
    /// True for the process's main thread.
    pub is_main: bool,
    /// What the thread runs (`main`, `libuv pool`, `worker 1 (/app/w.js)`,
    /// `V8 worker`, …), once a file's roles were found; "" if unknown.
    pub role: Option<String>,
    /// The thread's process: the profile's pid, or, for a profile of
    /// several processes (`machsampler record` following children), its own.
    pub pid: Option<u32>,
    /// The command line of the thread's process, when known.
    pub command: Option<String>,
}

/// One column per sample field; index `i` of each is sample `i`.
#[napi(object, js_name = "SampleTable")]
pub struct JsSampleTable<'env> {
    /// Index into `profile.threads`.
    pub thread: Uint32ArraySlice<'env>,
    /// When the sample was taken, in `profile` clock nanoseconds (monotonic).
    pub time_ns: BigUint64ArraySlice<'env>,
    /// Index into `profile.stacks` of the sample's leaf frame.
    pub stack: Uint32ArraySlice<'env>,
    /// 1 if the thread was not running: idle (its CPU time had not
    /// advanced; its previous stack recorded again without stopping it), or,
    /// in wall mode, stopped while waiting in a system call.
    pub idle: Uint8ArraySlice<'env>,
    /// CPU time the thread used since its previous sample, in nanoseconds.
    pub cpu_delta_ns: BigUint64ArraySlice<'env>,
    /// How many samples the row stands for (at least 1): a run of idle
    /// samples with the same stack, or a CPU timer that expired more than
    /// once before it was served, is one row. Profiles without it count 1.
    pub weight: Uint32ArraySlice<'env>,
}

/// Stacks as a prefix tree: node `i` is frame `frame[i]` called from node
/// `parent[i]` (-1 for a root). A sample's frames are found by following
/// `parent` from `samples.stack[i]`, leaf first.
#[napi(object, js_name = "StackTable")]
pub struct JsStackTable<'env> {
    /// Index into `profile.frames`.
    pub frame: Uint32ArraySlice<'env>,
    /// Parent node, or -1.
    pub parent: Int32ArraySlice<'env>,
}

/// Distinct frames.
#[napi(object, js_name = "FrameTable")]
pub struct JsFrameTable<'env> {
    /// Instruction address. The leaf frame of a stack is the interrupted
    /// pc; the others are return addresses (one past the call).
    pub address: BigUint64ArraySlice<'env>,
}

/// A module (executable or shared library) loaded when the profile was
/// taken; enough to symbolize the profile later from the files.
#[napi(object, js_name = "ModuleInfo")]
pub struct JsModuleInfo {
    /// Path of the file.
    pub path: String,
    /// First address of its image in the process.
    pub start: BigInt,
    /// End (exclusive) of its image in the process.
    pub end: BigInt,
    /// Process address minus file address (ELF load bias, Mach-O slide).
    pub bias: BigInt,
    /// GNU build id (Linux) or LC_UUID (macOS) in lowercase hex, or "".
    pub build_id: String,
}

/// Where a profile was recorded.
#[napi(object, js_name = "ProfileMeta")]
pub struct JsProfileMeta {
    /// `linux` or `darwin`.
    pub platform: String,
    /// `x86_64` or `aarch64`.
    pub arch: String,
    /// Process id of the profiled process.
    pub pid: u32,
    /// What a sample's time is: `'cpu'` (its thread's CPU time) or
    /// `'wall'` (wall-clock time, waiting included); `''` when no one mode
    /// says it: profiles written before it was recorded, stall reports,
    /// profiles merged from both modes.
    #[napi(ts_type = "'cpu' | 'wall' | ''")]
    pub mode: String,
}

/// Functions, one column per field; index `i` of each is function `i`.
#[napi(object, js_name = "FunctionTable")]
pub struct JsFunctionTable<'env> {
    /// Demangled name; `0x…` for an address nothing resolved.
    pub name: Vec<String>,
    /// Index into `profile.modules`, or -1.
    pub module: Int32ArraySlice<'env>,
    /// Source file, or "".
    pub file: Vec<String>,
    /// Line where the function starts, or 0.
    pub line: Uint32ArraySlice<'env>,
    /// `native`, `js`, or `unknown`.
    pub kind: Vec<String>,
}

/// Names for the frames of a profile (see {@link symbolicate}).
#[napi(object, js_name = "SymbolTable")]
pub struct JsSymbolTable<'env> {
    /// For each frame of `profile.frames`, its function.
    pub frame_function: Uint32ArraySlice<'env>,
    /// For each frame, its source line, or 0.
    pub frame_line: Uint32ArraySlice<'env>,
    pub functions: JsFunctionTable<'env>,
}

/// A recorded profile, as columnar typed arrays.
#[napi(object, js_name = "Profile")]
pub struct JsProfile<'env> {
    /// Layout version of this object (currently 1).
    pub version: u32,
    pub meta: JsProfileMeta,
    pub threads: Vec<JsThreadInfo>,
    pub samples: JsSampleTable<'env>,
    pub stacks: JsStackTable<'env>,
    pub frames: JsFrameTable<'env>,
    /// Modules loaded at `stop()`, for symbolization.
    pub modules: Vec<JsModuleInfo>,
    /// Session start, monotonic clock, nanoseconds.
    pub start_time_ns: BigInt,
    /// Session end, monotonic clock, nanoseconds.
    pub end_time_ns: BigInt,
    /// Requested sampling interval, nanoseconds.
    pub interval_ns: BigInt,
    /// Wall-clock time of `startTimeNs`, in milliseconds since the Unix epoch.
    pub start_wall_time_ms: f64,
    /// Statistics of the whole session.
    #[napi(ts_type = "Stats")]
    pub stats: JsStats,
    /// Function names, once the profile has been symbolicated.
    pub symbols: Option<JsSymbolTable<'env>>,
    /// Names of JavaScript frames, from V8: a frame address with the top
    /// bit set (`>= 2n ** 63n`) is a JS function, and its low 32 bits index
    /// this list. Names read `functionName (url:line:column)`.
    pub js_names: Vec<String>,
}

impl<'env> JsSymbolTable<'env> {
    pub fn from_symbols(env: &'env Env, s: &Symbols) -> napi::Result<Self> {
        let f = &s.functions;
        Ok(JsSymbolTable {
            frame_function: Uint32ArraySlice::copy_from(env, &s.frame_function)?,
            frame_line: Uint32ArraySlice::copy_from(env, &s.frame_line)?,
            functions: JsFunctionTable {
                name: f.iter().map(|f| f.name.clone()).collect(),
                module: Int32ArraySlice::copy_from(env, f.iter().map(|f| f.module).collect::<Vec<_>>())?,
                file: f.iter().map(|f| f.file.clone()).collect(),
                line: Uint32ArraySlice::copy_from(env, f.iter().map(|f| f.line).collect::<Vec<_>>())?,
                kind: f.iter().map(|f| f.kind.as_str().to_string()).collect(),
            },
        })
    }
}

impl<'env> JsProfile<'env> {
    pub fn from_data(env: &'env Env, d: &ProfileData) -> napi::Result<Self> {
        Ok(JsProfile {
            version: PROFILE_VERSION,
            meta: JsProfileMeta {
                platform: d.meta.platform.clone(),
                arch: d.meta.arch.clone(),
                pid: d.meta.pid,
                mode: d.meta.mode.clone(),
            },
            threads: d
                .threads
                .iter()
                .enumerate()
                .map(|(i, t)| JsThreadInfo {
                    tid: t.tid as f64,
                    name: t.name.clone(),
                    is_main: t.is_main,
                    role: (!d.thread_roles.is_empty()).then(|| d.role(i).to_string()),
                    pid: Some(d.pid_of(i)),
                    command: d.processes.get(d.process_of(i)).map(|p| p.command.clone()),
                })
                .collect(),
            samples: JsSampleTable {
                thread: Uint32ArraySlice::copy_from(env, &d.sample_thread)?,
                time_ns: BigUint64ArraySlice::copy_from(env, &d.sample_time_ns)?,
                stack: Uint32ArraySlice::copy_from(env, &d.sample_stack)?,
                idle: Uint8ArraySlice::copy_from(env, &d.sample_idle)?,
                cpu_delta_ns: BigUint64ArraySlice::copy_from(env, &d.sample_cpu_delta_ns)?,
                weight: Uint32ArraySlice::copy_from(env, &d.sample_weight)?,
            },
            stacks: JsStackTable {
                frame: Uint32ArraySlice::copy_from(env, &d.stack_frame)?,
                parent: Int32ArraySlice::copy_from(env, &d.stack_parent)?,
            },
            frames: JsFrameTable { address: BigUint64ArraySlice::copy_from(env, &d.frame_address)? },
            modules: d
                .modules
                .iter()
                .map(|m| JsModuleInfo {
                    path: m.path.clone(),
                    start: BigInt::from(m.start),
                    end: BigInt::from(m.end),
                    bias: BigInt::from(m.bias),
                    build_id: m.build_id.clone(),
                })
                .collect(),
            start_time_ns: BigInt::from(d.start_ns),
            end_time_ns: BigInt::from(d.end_ns),
            interval_ns: BigInt::from(d.interval_ns),
            start_wall_time_ms: d.start_wall_ms,
            stats: JsStats::from(&d.stats),
            symbols: d.symbols.as_ref().map(|s| JsSymbolTable::from_symbols(env, s)).transpose()?,
            js_names: d.js_names.clone(),
        })
    }
}

// ---------------------------------------------------------------------------
// JS -> Rust, checking everything.

fn object_at(parent: &Object, key: &str, path: &str) -> JsResult<Object<'static>> {
    let v: Unknown = parent.get_named_property(key).map_err(napi_fail)?;
    if v.get_type().map_err(napi_fail)? != ValueType::Object {
        return Err(einval(format!("{path}.{key} must be an object")));
    }
    // SAFETY: the type was just checked to be Object. The 'static lifetime
    // is only used within this call, while the handle scope is alive.
    unsafe { v.cast::<Object<'static>>() }.map_err(napi_fail)
}

macro_rules! typed_column {
    ($name:ident, $arr:ty, $elem:ty, $what:literal) => {
        fn $name(parent: &Object, key: &str, path: &str) -> JsResult<Vec<$elem>> {
            let v: Unknown = parent.get_named_property(key).map_err(napi_fail)?;
            let arr: $arr = <$arr as FromNapiValue>::from_unknown(v)
                .map_err(|_| einval(format!("{path}.{key} must be a {}", $what)))?;
            Ok(arr.to_vec())
        }
    };
}
typed_column!(u32_column, Uint32Array, u32, "Uint32Array");
typed_column!(i32_column, Int32Array, i32, "Int32Array");
typed_column!(u8_column, Uint8Array, u8, "Uint8Array");
typed_column!(u64_column, BigUint64Array, u64, "BigUint64Array");

fn bigint_u64(v: Unknown, what: &str) -> JsResult<u64> {
    if v.get_type().map_err(napi_fail)? != ValueType::BigInt {
        return Err(einval(format!("{what} must be a bigint")));
    }
    // SAFETY: the type was just checked to be BigInt.
    let b: BigInt = unsafe { v.cast::<BigInt>() }.map_err(napi_fail)?;
    let (signed, value, lossless) = b.get_u64();
    if signed || !lossless {
        return Err(einval(format!("{what} must be a non-negative 64-bit bigint")));
    }
    Ok(value)
}

fn number(obj: &Object, key: &str, path: &str) -> JsResult<f64> {
    let v: Unknown = obj.get_named_property(key).map_err(napi_fail)?;
    if v.get_type().map_err(napi_fail)? != ValueType::Number {
        return Err(einval(format!("{path}.{key} must be a number")));
    }
    // SAFETY: the type was just checked to be Number.
    unsafe { v.cast::<f64>() }.map_err(napi_fail)
}

fn string(obj: &Object, key: &str, path: &str) -> JsResult<String> {
    let v: Unknown = obj.get_named_property(key).map_err(napi_fail)?;
    if v.get_type().map_err(napi_fail)? != ValueType::String {
        return Err(einval(format!("{path}.{key} must be a string")));
    }
    // SAFETY: the type was just checked to be String.
    unsafe { v.cast::<String>() }.map_err(napi_fail)
}

fn array_of(obj: &Object, key: &str, path: &str) -> JsResult<Vec<Object<'static>>> {
    let v: Unknown = obj.get_named_property(key).map_err(napi_fail)?;
    let is_array = v.get_type().map_err(napi_fail)? == ValueType::Object && v.is_array().unwrap_or(false);
    if !is_array {
        return Err(einval(format!("{path}.{key} must be an array")));
    }
    // SAFETY: the value was just checked to be an array object.
    let arr: Object<'static> = unsafe { v.cast() }.map_err(napi_fail)?;
    let len = arr.get_array_length().map_err(napi_fail)?;
    (0..len)
        .map(|i| {
            let e: Unknown = arr.get_element(i).map_err(napi_fail)?;
            if e.get_type().map_err(napi_fail)? != ValueType::Object {
                return Err(einval(format!("{path}.{key}[{i}] must be an object")));
            }
            // SAFETY: the type was just checked to be Object.
            unsafe { e.cast::<Object<'static>>() }.map_err(napi_fail)
        })
        .collect()
}

fn string_array(obj: &Object, key: &str, path: &str) -> JsResult<Vec<String>> {
    let v: Unknown = obj.get_named_property(key).map_err(napi_fail)?;
    Vec::<String>::from_unknown(v).map_err(|_| einval(format!("{path}.{key} must be an array of strings")))
}

/// An array of strings, or [] when the property is absent.
fn optional_string_array(obj: &Object, key: &str, path: &str) -> JsResult<Vec<String>> {
    let v: Unknown = obj.get_named_property(key).map_err(napi_fail)?;
    if v.get_type().map_err(napi_fail)? == ValueType::Undefined {
        return Ok(Vec::new());
    }
    string_array(obj, key, path)
}

fn symbols_from_js(obj: &Object) -> JsResult<Symbols> {
    let p = "profile.symbols";
    let fns = object_at(obj, "functions", p)?;
    let fp = "profile.symbols.functions";
    let names = string_array(&fns, "name", fp)?;
    let modules = i32_column(&fns, "module", fp)?;
    let files = string_array(&fns, "file", fp)?;
    let lines = u32_column(&fns, "line", fp)?;
    let kinds = string_array(&fns, "kind", fp)?;
    let n = names.len();
    if [modules.len(), files.len(), lines.len(), kinds.len()].iter().any(|&l| l != n) {
        return Err(einval(format!("{fp} columns differ in length")));
    }
    let mut functions = Vec::with_capacity(n);
    for (i, (((name, module), file), (line, kind))) in
        names.into_iter().zip(modules).zip(files).zip(lines.into_iter().zip(kinds)).enumerate()
    {
        let kind = FunctionKind::parse(&kind)
            .ok_or_else(|| einval(format!("{fp}.kind[{i}] must be 'native', 'js' or 'unknown'")))?;
        functions.push(Function { name, module, file, line, kind });
    }
    Ok(Symbols {
        frame_function: u32_column(obj, "frameFunction", p)?,
        frame_line: u32_column(obj, "frameLine", p)?,
        functions,
    })
}

fn stats_from_js(obj: &Object) -> JsResult<StatsSnapshot> {
    let mut stats = StatsSnapshot::default();
    for (key, field) in stats.fields_mut() {
        *field = obj
            .get_named_property::<Unknown>(&crate::profile::stat_key(key))
            .ok()
            .filter(|v| v.get_type().ok() == Some(ValueType::Number))
            // SAFETY: the type was just checked to be Number.
            .and_then(|v| unsafe { v.cast::<f64>() }.ok())
            .filter(|n| n.is_finite() && *n >= 0.0)
            .map(|n| n as u64)
            .unwrap_or(0);
    }
    Ok(stats)
}

/// Gives a symbolicated profile without thread roles (one from `stop()` or
/// built in JavaScript) the roles its stacks show, as reading a file does:
/// reports and formats select and name threads by them. The profile must be
/// valid (`ProfileData::validate`).
pub fn assign_roles_if_missing(data: &mut ProfileData) {
    if !data.thread_roles.is_empty() || data.symbols.is_none() {
        return;
    }
    let names = crate::formats::names::resolve(data).into_owned();
    crate::profile::roles::assign(data, &names, &[]);
}

/// Reads a `Profile` object back into `ProfileData`, validating it.
pub fn profile_from_js(value: Unknown) -> Result<ProfileData, &'static str> {
    if value.get_type().map_err(napi_fail)? != ValueType::Object {
        return Err(einval("profile must be an object returned by stop() or loadProfile()"));
    }
    // SAFETY: the type was just checked to be Object.
    let obj: Object = unsafe { value.cast() }.map_err(napi_fail)?;
    let version = number(&obj, "version", "profile")?;
    if version != PROFILE_VERSION as f64 {
        return Err(einval(format!("profile.version is {version}; this machsampler reads version {PROFILE_VERSION}")));
    }
    let p = "profile";
    let meta = object_at(&obj, "meta", p)?;
    let samples = object_at(&obj, "samples", p)?;
    let stacks = object_at(&obj, "stacks", p)?;
    let frames = object_at(&obj, "frames", p)?;
    let thread_objects = array_of(&obj, "threads", p)?;
    let threads = thread_objects
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let tp = format!("profile.threads[{i}]");
            let is_main: Unknown = t.get_named_property("isMain").map_err(napi_fail)?;
            Ok(ThreadRecord {
                tid: number(t, "tid", &tp)? as u64,
                name: string(t, "name", &tp)?,
                // SAFETY: cast only after the type check.
                is_main: is_main.get_type().ok() == Some(ValueType::Boolean)
                    && unsafe { is_main.cast::<bool>() }.unwrap_or(false),
            })
        })
        .collect::<JsResult<Vec<_>>>()?;
    let modules = array_of(&obj, "modules", p)?
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mp = format!("profile.modules[{i}]");
            let big = |k: &str| bigint_u64(m.get_named_property(k).map_err(napi_fail)?, &format!("{mp}.{k}"));
            Ok(Module {
                path: string(m, "path", &mp)?,
                start: big("start")?,
                end: big("end")?,
                bias: big("bias")?,
                build_id: string(m, "buildId", &mp)?,
            })
        })
        .collect::<JsResult<Vec<_>>>()?;
    let symbols_value: Unknown = obj.get_named_property("symbols").map_err(napi_fail)?;
    let symbols = match symbols_value.get_type().map_err(napi_fail)? {
        ValueType::Undefined | ValueType::Null => None,
        ValueType::Object => Some(symbols_from_js(&object_at(&obj, "symbols", p)?)?),
        _ => return Err(einval("profile.symbols must be an object or undefined")),
    };
    let stats = stats_from_js(&object_at(&obj, "stats", p)?)?;
    // Roles and processes, when the threads carry them.
    let optional = |t: &Object, key: &str| -> JsResult<Option<Unknown>> {
        let v: Unknown = t.get_named_property(key).map_err(napi_fail)?;
        Ok((v.get_type().map_err(napi_fail)? != ValueType::Undefined).then_some(v))
    };
    let mut thread_roles = Vec::new();
    let mut thread_pids = Vec::new();
    let mut commands = Vec::new();
    for (i, t) in thread_objects.iter().enumerate() {
        let tp = format!("profile.threads[{i}]");
        if optional(t, "role")?.is_some() {
            thread_roles.push(string(t, "role", &tp)?);
        }
        if optional(t, "pid")?.is_some() {
            thread_pids.push(number(t, "pid", &tp)? as u32);
        }
        commands.push(if optional(t, "command")?.is_some() { string(t, "command", &tp)? } else { String::new() });
    }
    let mut data = ProfileData {
        meta: Meta {
            platform: string(&meta, "platform", "profile.meta")?,
            arch: string(&meta, "arch", "profile.meta")?,
            pid: number(&meta, "pid", "profile.meta")? as u32,
            mode: match optional(&meta, "mode")? {
                Some(_) => match string(&meta, "mode", "profile.meta")?.as_str() {
                    m @ ("cpu" | "wall" | "") => m.to_string(),
                    _ => return Err(einval("profile.meta.mode must be 'cpu', 'wall' or '' (not recorded)")),
                },
                None => String::new(),
            },
        },
        threads,
        sample_thread: u32_column(&samples, "thread", "profile.samples")?,
        sample_time_ns: u64_column(&samples, "timeNs", "profile.samples")?,
        sample_stack: u32_column(&samples, "stack", "profile.samples")?,
        sample_idle: u8_column(&samples, "idle", "profile.samples")?,
        sample_cpu_delta_ns: u64_column(&samples, "cpuDeltaNs", "profile.samples")?,
        sample_weight: match samples.has_named_property("weight").map_err(napi_fail)? {
            true => u32_column(&samples, "weight", "profile.samples")?,
            false => Vec::new(),
        },
        stack_frame: u32_column(&stacks, "frame", "profile.stacks")?,
        stack_parent: i32_column(&stacks, "parent", "profile.stacks")?,
        frame_address: u64_column(&frames, "address", "profile.frames")?,
        modules,
        start_ns: bigint_u64(obj.get_named_property("startTimeNs").map_err(napi_fail)?, "profile.startTimeNs")?,
        end_ns: bigint_u64(obj.get_named_property("endTimeNs").map_err(napi_fail)?, "profile.endTimeNs")?,
        interval_ns: bigint_u64(obj.get_named_property("intervalNs").map_err(napi_fail)?, "profile.intervalNs")?,
        start_wall_ms: number(&obj, "startWallTimeMs", p)?,
        stats,
        symbols,
        js_names: optional_string_array(&obj, "jsNames", p)?,
        ..Default::default()
    };
    if data.sample_weight.is_empty() {
        data.sample_weight = vec![1; data.sample_thread.len()];
    }
    if thread_roles.len() == data.threads.len() {
        data.thread_roles = thread_roles;
    }
    if thread_pids.len() == data.threads.len() && thread_pids.iter().any(|&p| p != data.meta.pid) {
        for (t, &pid) in thread_pids.iter().enumerate() {
            let k = match data.processes.iter().position(|p| p.pid == pid) {
                Some(k) => k,
                None => {
                    data.processes.push(crate::profile::ProcessInfo { pid, command: commands[t].clone() });
                    data.processes.len() - 1
                }
            };
            data.thread_process.push(k as u32);
        }
    }
    data.validate().map_err(|e| einval(format!("profile is inconsistent: {e}")))?;
    assign_roles_if_missing(&mut data);
    Ok(data)
}
