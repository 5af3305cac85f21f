//! Files and reports from JS: `exportProfile`, `saveProfile`,
//! `loadProfile`, `formatFromPath`, `profileReport`, and the CLI's option
//! check. The work is in `crate::formats`; this converts arguments and maps
//! errors to coded JS errors (EINVAL for bad input and bad files, the
//! errno name for file-system failures).

use std::io;
use std::path::Path;

use napi::bindgen_prelude::*;
use napi::{Env, JsValue, KeyCollectionMode, KeyConversion, KeyFilter, ValueType};
use napi_derive::napi;

use super::profile::{profile_from_js, JsProfile};
use super::{einval, napi_fail, JsResult, JsStats};
use crate::formats::report::{self, ReportOptions, SortBy};
use crate::formats::{machprof, ExportOptions, Format};
use crate::profile::ProfileData;

fn type_of(v: &Unknown) -> JsResult<ValueType> {
    v.get_type().map_err(napi_fail)
}

fn kind(ty: ValueType) -> String {
    format!("{ty:?}").to_lowercase()
}

/// The own enumerable string-keyed properties of an options object, or
/// none for `undefined`. Anything else is an EINVAL naming `what`.
pub(crate) fn entries<'a>(v: Unknown<'a>, what: &str) -> JsResult<Vec<(String, Unknown<'a>)>> {
    match type_of(&v)? {
        ValueType::Undefined => return Ok(Vec::new()),
        ValueType::Object if !v.is_array().unwrap_or(false) => {}
        ty => return Err(einval(format!("{what} must be an object, got {}", kind(ty)))),
    }
    // SAFETY: the value's type was just checked to be Object.
    let obj: Object = unsafe { v.cast() }.map_err(napi_fail)?;
    let keys = obj
        .get_all_property_names(KeyCollectionMode::OwnOnly, KeyFilter::Enumerable, KeyConversion::NumbersToStrings)
        .map_err(napi_fail)?;
    let mut out = Vec::new();
    for i in 0..keys.get_array_length().map_err(napi_fail)? {
        let key: Unknown = keys.get_element(i).map_err(napi_fail)?;
        if type_of(&key)? != ValueType::String {
            return Err(einval(format!("{what} has a symbol key")));
        }
        // SAFETY: the key's type was just checked to be String.
        let key: String = unsafe { key.cast() }.map_err(napi_fail)?;
        let val: Unknown = obj.get_named_property(&key).map_err(napi_fail)?;
        // An explicit undefined means "the default", as in start().
        if type_of(&val)? != ValueType::Undefined {
            out.push((key, val));
        }
    }
    Ok(out)
}

pub(crate) fn boolean(v: &Unknown, what: &str) -> JsResult<bool> {
    match type_of(v)? {
        // SAFETY: the type was just checked to be Boolean.
        ValueType::Boolean => unsafe { v.cast::<bool>() }.map_err(napi_fail),
        ty => Err(einval(format!("{what} must be a boolean, got {}", kind(ty)))),
    }
}

pub(crate) fn string(v: &Unknown, what: &str) -> JsResult<String> {
    match type_of(v)? {
        // SAFETY: the type was just checked to be String.
        ValueType::String => unsafe { v.cast::<String>() }.map_err(napi_fail),
        ty => Err(einval(format!("{what} must be a string, got {}", kind(ty)))),
    }
}

pub(crate) fn number(v: &Unknown, what: &str) -> JsResult<f64> {
    match type_of(v)? {
        // SAFETY: the type was just checked to be Number.
        ValueType::Number => unsafe { v.cast::<f64>() }.map_err(napi_fail),
        ty => Err(einval(format!("{what} must be a number, got {}", kind(ty)))),
    }
}

fn parse_format(name: &str) -> JsResult<Format> {
    Format::parse(name).ok_or_else(|| einval(format!("unknown format '{name}'; formats are {}", Format::names())))
}

const EXPORT_KEYS: &str = "format, includeIdle, threadPrefix, compress, view";

fn parse_view(v: &Unknown, what: &str) -> JsResult<crate::formats::View> {
    let name = string(v, what)?;
    crate::formats::View::parse(&name)
        .ok_or_else(|| einval(format!("{what} must be one of {}, got '{name}'", crate::formats::View::NAMES)))
}

/// Export options; `format` is accepted only where the caller allows it.
/// The last value says whether `compress` was given (see [`check_compress`]).
fn export_options(v: Unknown, allow_format: bool) -> JsResult<(Option<Format>, ExportOptions, bool)> {
    let mut opts = ExportOptions::default();
    let mut format = None;
    let mut compress_given = false;
    for (key, val) in entries(v, "options")? {
        let what = format!("options.{key}");
        match key.as_str() {
            "format" if allow_format => format = Some(parse_format(&string(&val, &what)?)?),
            "includeIdle" => opts.include_idle = boolean(&val, &what)?,
            "threadPrefix" => opts.thread_prefix = boolean(&val, &what)?,
            "compress" => {
                opts.compress = boolean(&val, &what)?;
                compress_given = true;
            }
            "view" => opts.view = parse_view(&val, &what)?,
            "format" => {
                return Err(einval(
                    "options.format is for saveProfile(); exportProfile() takes the format as its second argument",
                ))
            }
            _ => {
                let valid = if allow_format { EXPORT_KEYS } else { EXPORT_KEYS.trim_start_matches("format, ") };
                return Err(einval(format!("unknown option '{key}'; valid options are {valid}")));
            }
        }
    }
    Ok((format, opts, compress_given))
}

/// `compress` is a choice for `.machprof` only: pprof is always gzipped,
/// the other formats never. Given for another, it is refused rather than
/// ignored.
fn check_compress(format: Format, given: bool) -> JsResult<()> {
    if given && format != Format::Machprof {
        return Err(einval(format!(
            "options.compress applies to the machprof format only; {} is {}",
            format.name(),
            if format == Format::Pprof { "always gzip-compressed" } else { "never compressed" }
        )));
    }
    Ok(())
}

/// A file-system error as a JS error whose `code` is the errno name.
fn io_error(e: &io::Error, verb: &str, path: &str) -> napi::Error<&'static str> {
    use io::ErrorKind::*;
    let (code, text) = match (e.raw_os_error(), e.kind()) {
        (Some(libc::ENAMETOOLONG), _) => ("ENAMETOOLONG", "file name too long".to_string()),
        (Some(libc::EFBIG), _) => ("EFBIG", "file too large".to_string()),
        (Some(libc::ELOOP), _) => ("ELOOP", "too many levels of symbolic links".to_string()),
        (Some(libc::EDQUOT), _) => ("EDQUOT", "disk quota exceeded".to_string()),
        (Some(libc::EMFILE | libc::ENFILE), _) => ("EMFILE", "too many open files".to_string()),
        (_, NotFound) if verb == "write" => ("ENOENT", "no such directory".to_string()),
        (_, NotFound) => ("ENOENT", "no such file or directory".to_string()),
        (_, PermissionDenied) => ("EACCES", "permission denied".to_string()),
        (_, IsADirectory) => ("EISDIR", "is a directory".to_string()),
        (_, NotADirectory) => ("ENOTDIR", "a component of the path is not a directory".to_string()),
        (_, ReadOnlyFilesystem) => ("EROFS", "read-only file system".to_string()),
        (_, StorageFull) => ("ENOSPC", "no space left on device".to_string()),
        (_, BrokenPipe) => ("EPIPE", "the reader closed the pipe".to_string()),
        (_, AlreadyExists) => ("EEXIST", "already exists".to_string()),
        // A NUL byte in the path, which no file name can hold.
        (_, InvalidInput) => ("EINVAL", e.to_string()),
        _ => ("EIO", e.to_string()),
    };
    napi::Error::new(code, format!("cannot {verb} '{path}': {text}"))
}

/// Options for {@link exportProfile} and {@link saveProfile}. Every field
/// is optional.
// Only its type is used (for the .d.ts): the functions validate by hand.
#[allow(dead_code)]
#[napi(object, js_name = "ExportOptions")]
pub struct JsExportOptions {
    /// saveProfile only: the format, overriding the file name's extension.
    pub format: Option<String>,
    /// Keep idle samples in collapsed stacks and flame graphs (default
    /// false: those views show where the CPU went). Timeline formats always
    /// keep every sample.
    pub include_idle: Option<bool>,
    /// Root every collapsed stack / flame-graph tower at its thread
    /// (default true). False merges all threads.
    pub thread_prefix: Option<bool>,
    /// gzip a `.machprof` file (default true). Machprof only: given with
    /// another format it is refused (`EINVAL`), since pprof is always
    /// gzipped and the others never are.
    pub compress: Option<bool>,
    /// Which frames to show: `mixed` (default: everything), `js` (runtime
    /// internals folded into the calling JavaScript function, as
    /// `--cpu-prof` shows time; addons' native frames kept) or `native`.
    #[napi(ts_type = "'mixed' | 'js' | 'native'")]
    pub view: Option<String>,
}

/// Writes a profile in a format, into a Buffer.
///
/// Formats: `machprof` (lossless, readable by {@link loadProfile}), `pprof`
/// (gzipped profile.proto), `speedscope`, `firefox` (Firefox Profiler),
/// `cpuprofile` (Chrome DevTools, main thread), `collapsed` (folded
/// stacks), `html` / `flamegraph` (flame-graph page), `svg`.
/// Names come from `profile.symbols` (see {@link symbolicate}); without
/// them frames are named by address.
///
/// @throws `EINVAL` for an unknown format or option, or an invalid profile.
#[napi(
    ts_args_type = "profile: Profile, format: string, options?: Omit<ExportOptions, 'format'>",
    ts_return_type = "Buffer"
)]
pub fn export_profile<'env>(
    env: &'env Env,
    profile: Unknown,
    format: Unknown,
    options: Unknown,
) -> Result<BufferSlice<'env>, &'static str> {
    let format = parse_format(&string(&format, "format")?)?;
    let (_, opts, compress_given) = export_options(options, false)?;
    check_compress(format, compress_given)?;
    let data = profile_from_js(profile)?;
    let bytes = crate::formats::export_with(&data, format, &opts).map_err(einval)?;
    BufferSlice::copy_from(env, bytes).map_err(napi_fail)
}

/// Writes a profile to a file, atomically: a temporary file in the same
/// directory, then a rename, so a crash never leaves a partial profile.
/// The format is `options.format` (or `options` itself when it is a
/// string), else the file name's extension. Returns the format written.
///
/// @throws `EINVAL` for an unknown format, extension or option, or an
///   invalid profile; `ENOENT`, `EACCES`, `EISDIR`, … if the file cannot
///   be written (nothing is left behind).
#[napi(ts_args_type = "profile: Profile, path: string, options?: string | ExportOptions", ts_return_type = "string")]
pub fn save_profile(profile: Unknown, path: Unknown, options: Unknown) -> Result<String, &'static str> {
    let save = if type_of(&options)? == ValueType::String {
        let format = parse_format(&string(&options, "format")?)?;
        SaveRequest { path: string(&path, "path")?, format, options: ExportOptions::default() }
    } else {
        SaveRequest::parse(&path, "path", Some(options))?
    };
    save.write(&profile_from_js(profile)?)?;
    Ok(save.format.name().to_string())
}

fn format_of(path: &str) -> JsResult<Format> {
    Format::from_path(path).ok_or_else(|| {
        einval(format!(
            "cannot tell the format of '{path}' from its name; use an extension ({}) or give a format",
            Format::extensions()
        ))
    })
}

/// Reads a `.machprof` file back into a {@link Profile}, symbols included
/// if it was saved symbolicated.
///
/// @throws `ENOENT`, `EACCES`, `EISDIR`, … if the file cannot be read;
///   `EINVAL` if it is not a machsampler profile, is truncated or corrupt,
///   or has a format version this machsampler does not read.
#[napi(ts_args_type = "path: string", ts_return_type = "Profile")]
pub fn load_profile<'env>(env: &'env Env, path: Unknown) -> Result<JsProfile<'env>, &'static str> {
    let data = read_machprof(&string(&path, "path")?)?;
    JsProfile::from_data(env, &data).map_err(napi_fail)
}

/// The file's bytes if it starts as a `.machprof` file does, else only
/// its first few: `/dev/zero`, a device or a pipe of something else is
/// refused without being read to its end (which could be never).
fn read_if_profile(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    (&mut f).take(machprof::MAGIC.len() as u64).read_to_end(&mut bytes)?;
    if machprof::looks_like(&bytes) {
        f.read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

pub(crate) fn read_machprof(path: &str) -> JsResult<ProfileData> {
    if Path::new(path).is_dir() {
        return Err(napi::Error::new("EISDIR", format!("cannot read '{path}': is a directory")));
    }
    let bytes = read_if_profile(path).map_err(|e| io_error(&e, "read", path))?;
    machprof::decode(&bytes).map_err(|e| {
        let hint = match Format::from_path(path) {
            Some(f) if f != Format::Machprof && !machprof::looks_like(&bytes) => {
                format!(" (its name says {}; only .machprof files can be read back)", f.name())
            }
            _ => String::new(),
        };
        einval(format!("cannot load '{path}': {e}{hint}"))
    })
}

/// The format a file name implies by its extension: `.machprof`,
/// `.pb.gz`/`.pprof`, `.speedscope.json`, `.fxprof.json`, `.cpuprofile`,
/// `.collapsed`/`.folded`, `.html`/`.htm`, `.svg`.
///
/// @throws `EINVAL` if the extension is none of those.
#[napi(ts_args_type = "path: string", ts_return_type = "string")]
pub fn format_from_path(path: Unknown) -> Result<String, &'static str> {
    Ok(format_of(&string(&path, "path")?)?.name().to_string())
}

/// One output format, as {@link formats} lists it.
#[napi(object, js_name = "FormatInfo")]
pub struct JsFormatInfo {
    /// The name `--format` and the `format` options take.
    pub name: String,
    /// File-name endings that imply it, the usual one first.
    pub extensions: Vec<String>,
    /// Other accepted names.
    pub aliases: Vec<String>,
    /// What it is and what opens it.
    pub description: String,
}

/// Every output format, in the order help texts list them.
#[napi]
pub fn formats() -> Vec<JsFormatInfo> {
    Format::ALL
        .into_iter()
        .map(|f| JsFormatInfo {
            name: f.name().to_string(),
            extensions: f.extensions_of().into_iter().map(String::from).collect(),
            aliases: f.aliases().iter().map(|a| a.to_string()).collect(),
            description: f.description().to_string(),
        })
        .collect()
}

/// The canonical name of a format name or alias (`flamegraph` is `html`),
/// case-insensitive.
///
/// @throws `EINVAL` for an unknown name; the message lists the formats.
#[napi(ts_args_type = "name: string", ts_return_type = "string")]
pub fn parse_format_name(name: Unknown) -> Result<String, &'static str> {
    Ok(parse_format(&string(&name, "name")?)?.name().to_string())
}

/// Options for {@link profileReport}. Every field is optional.
// Only its type is used (for the .d.ts): the function validates by hand.
#[allow(dead_code)]
#[napi(object, js_name = "ReportOptions")]
pub struct JsReportOptions {
    /// Only threads with this role (`main`, `worker`, `pool`, `libuv pool`,
    /// `V8 worker`, …), this name (all of them) or this tid.
    #[napi(ts_type = "string | number")]
    pub thread: Option<String>,
    /// Rows per table: an integer from 1 to 100000. Default 15.
    pub top: Option<u32>,
    /// Sort functions by `self` (default) or `total` samples.
    #[napi(ts_type = "'self' | 'total'")]
    pub by: Option<String>,
    /// Count idle samples too (default false: where the CPU went).
    pub include_idle: Option<bool>,
    /// Which frames to count (see {@link ExportOptions.view}).
    #[napi(ts_type = "'mixed' | 'js' | 'native'")]
    pub view: Option<String>,
}

/// A thread in a {@link ProfileReport}.
#[napi(object, js_name = "ReportThread")]
pub struct JsReportThread {
    pub tid: f64,
    pub name: String,
    /// What the thread runs (`main`, `libuv pool`, `worker 1 (/app/w.js)`,
    /// `V8 worker`, …), or "" if unknown.
    pub role: String,
    /// The thread's process.
    pub pid: u32,
    pub is_main: bool,
    /// Every sample of the thread, idle included.
    pub samples: f64,
    /// Its idle samples.
    pub idle: f64,
}

/// A function in a {@link ProfileReport}.
#[napi(object, js_name = "ReportFunction")]
pub struct JsReportFunction {
    pub name: String,
    /// File name of its module, or "".
    pub module: String,
    /// Source file, or "".
    pub file: String,
    /// Line where it starts, or 0.
    pub line: u32,
    /// `native`, `js` or `unknown`.
    pub kind: String,
    /// Samples in which it was the leaf (running itself).
    pub self_samples: f64,
    /// Samples in which it was on the stack (counted once per sample).
    pub total_samples: f64,
}

/// A call path in a {@link ProfileReport}.
#[napi(object, js_name = "ReportPath")]
pub struct JsReportPath {
    /// Function names, root first.
    pub frames: Vec<String>,
    pub samples: f64,
}

/// Hot functions and paths of a profile (see {@link profileReport}).
#[napi(object, js_name = "ProfileReport")]
pub struct JsProfileReport {
    /// Samples counted: the selected threads, idle ones only if asked for.
    pub samples: f64,
    /// Idle samples of the selected threads that were not counted.
    pub idle_left_out: f64,
    /// Sampling interval, nanoseconds: a sample stands for this much time.
    pub interval_ns: f64,
    /// Length of the session, nanoseconds.
    pub duration_ns: f64,
    /// The selected threads, busiest first.
    pub threads: Vec<JsReportThread>,
    /// The top functions, sorted by `options.by`.
    pub functions: Vec<JsReportFunction>,
    /// The top call paths (function-level stacks), by samples.
    pub paths: Vec<JsReportPath>,
}

const REPORT_KEYS: &str = "thread, top, by, includeIdle, view";

/// Report options read from JS; `thread` owned, since `ReportOptions`
/// borrows it.
struct ReportRequest {
    thread: Option<String>,
    top: usize,
    by: SortBy,
    include_idle: bool,
    view: crate::formats::View,
}

impl ReportRequest {
    fn parse(options: Unknown) -> JsResult<Self> {
        let d = ReportOptions::default();
        let mut r = ReportRequest { thread: None, top: d.top, by: d.by, include_idle: d.include_idle, view: d.view };
        for (key, val) in entries(options, "options")? {
            let what = format!("options.{key}");
            match key.as_str() {
                "thread" => {
                    r.thread = Some(match type_of(&val)? {
                        ValueType::Number => number(&val, &what)?.to_string(),
                        _ => string(&val, &what)?,
                    })
                }
                "top" => {
                    let n = number(&val, &what)?;
                    if !(n.fract() == 0.0 && (1.0..=100_000.0).contains(&n)) {
                        return Err(einval(format!(
                            "{what} must be an integer from 1 to 100000, got {}",
                            crate::sampler::options::js_number(n)
                        )));
                    }
                    r.top = n as usize;
                }
                "by" => {
                    let by = string(&val, &what)?;
                    r.by = SortBy::parse(&by)
                        .ok_or_else(|| einval(format!("{what} must be 'self' or 'total', got '{by}'")))?;
                }
                "includeIdle" => r.include_idle = boolean(&val, &what)?,
                "view" => r.view = parse_view(&val, &what)?,
                _ => return Err(einval(format!("unknown option '{key}'; valid options are {REPORT_KEYS}"))),
            }
        }
        Ok(r)
    }

    fn run(&self, data: &ProfileData) -> JsResult<JsProfileReport> {
        let opts = ReportOptions {
            thread: self.thread.as_deref(),
            top: self.top,
            by: self.by,
            include_idle: self.include_idle,
            view: self.view,
        };
        report::report(data, &opts).map(JsProfileReport::from).map_err(einval)
    }
}

impl From<report::Report> for JsProfileReport {
    fn from(r: report::Report) -> Self {
        JsProfileReport {
            samples: r.samples as f64,
            idle_left_out: r.idle_left_out as f64,
            interval_ns: r.interval_ns as f64,
            duration_ns: r.duration_ns as f64,
            threads: r
                .threads
                .into_iter()
                .map(|t| JsReportThread {
                    tid: t.tid as f64,
                    name: t.name,
                    role: t.role,
                    pid: t.pid,
                    is_main: t.is_main,
                    samples: t.samples as f64,
                    idle: t.idle as f64,
                })
                .collect(),
            functions: r
                .functions
                .into_iter()
                .map(|f| JsReportFunction {
                    name: f.name,
                    module: f.module,
                    file: f.file,
                    line: f.line,
                    kind: f.kind.to_string(),
                    self_samples: f.self_samples as f64,
                    total_samples: f.total_samples as f64,
                })
                .collect(),
            paths: r.paths.into_iter().map(|p| JsReportPath { frames: p.frames, samples: p.samples as f64 }).collect(),
        }
    }
}

/// Hot functions (by self or total samples) and hot call paths, for all
/// threads or the ones `options.thread` names. Names come from
/// `profile.symbols` when present. Runs in time proportional to the
/// distinct stacks, so it is fast on large profiles.
///
/// @throws `EINVAL` for a bad option, a thread that does not exist (the
///   message lists the threads), or an invalid profile.
#[napi(ts_args_type = "profile: Profile, options?: ReportOptions", ts_return_type = "ProfileReport")]
pub fn profile_report(profile: Unknown, options: Unknown) -> Result<JsProfileReport, &'static str> {
    let request = ReportRequest::parse(options)?;
    request.run(&profile_from_js(profile)?)
}

/// Where to write a profile: a path and a format, with its options.
pub(crate) struct SaveRequest {
    pub path: String,
    pub format: Format,
    pub options: ExportOptions,
}

impl SaveRequest {
    /// Reads `output` (a path) and the export options in `options`, which
    /// may name a `format`; without one, the path's extension decides.
    pub fn parse(output: &Unknown, what: &str, options: Option<Unknown>) -> JsResult<Self> {
        let path = string(output, what)?;
        let (format, options, compress_given) = match options {
            Some(o) => export_options(o, true)?,
            None => (None, ExportOptions::default(), false),
        };
        let format = match format {
            Some(f) => f,
            None => format_of(&path)?,
        };
        check_compress(format, compress_given)?;
        Ok(SaveRequest { path, format, options })
    }

    /// Whether the file can be written (see [`crate::formats::check_writable`]).
    pub fn check(&self) -> JsResult<()> {
        crate::formats::check_writable(Path::new(&self.path)).map_err(|e| io_error(&e, "write", &self.path))
    }

    pub fn write(&self, data: &ProfileData) -> JsResult<()> {
        let bytes = crate::formats::export_with(data, self.format, &self.options).map_err(einval)?;
        crate::formats::write_atomic(Path::new(&self.path), &bytes).map_err(|e| io_error(&e, "write", &self.path))
    }
}

/// One process of a profile, in a {@link ProfileSummary}.
#[napi(object, js_name = "ProcessSummary")]
pub struct JsProcessSummary {
    pub pid: u32,
    /// Its command line, or "" if unknown.
    pub command: String,
    /// Samples of its threads (weights counted), idle ones included.
    pub samples: f64,
    /// Threads with at least one sample.
    pub threads: u32,
}

/// A profile file at a glance: what `machsampler report` and `record`
/// print above their tables.
#[napi(object, js_name = "ProfileSummary")]
pub struct JsProfileSummary {
    pub platform: String,
    pub arch: String,
    pub pid: u32,
    /// What a sample's time is: `'cpu'`, `'wall'`, or `''` (not recorded).
    #[napi(ts_type = "'cpu' | 'wall' | ''")]
    pub mode: String,
    /// Length of the session, nanoseconds.
    pub duration_ns: f64,
    /// Sampling interval, nanoseconds.
    pub interval_ns: f64,
    /// Samples (weights counted: a row may stand for several), idle ones
    /// included.
    pub samples: f64,
    /// Of those, samples of idle threads.
    pub idle_samples: f64,
    /// Running samples spent writing V8's code log (on under `record`, to
    /// split out inlined functions): the profiler's cost on the program's
    /// threads. 0 without names.
    pub v8_log_samples: f64,
    /// Threads with at least one sample.
    pub threads_sampled: u32,
    /// Threads the sampler saw.
    pub threads_seen: u32,
    /// Whether the profile carries function names.
    pub symbolicated: bool,
    #[napi(ts_type = "Stats")]
    pub stats: JsStats,
    /// Every process of the profile (one unless `record` followed child
    /// processes).
    pub processes: Vec<JsProcessSummary>,
}

impl JsProfileSummary {
    pub fn of(d: &ProfileData) -> Self {
        let mut sampled = vec![false; d.threads.len()];
        for &t in &d.sample_thread {
            if let Some(s) = sampled.get_mut(t as usize) {
                *s = true;
            }
        }
        JsProfileSummary {
            platform: d.meta.platform.clone(),
            arch: d.meta.arch.clone(),
            pid: d.meta.pid,
            mode: d.meta.mode.clone(),
            duration_ns: d.end_ns.saturating_sub(d.start_ns) as f64,
            interval_ns: d.interval_ns as f64,
            samples: d.total_weight() as f64,
            idle_samples: (0..d.sample_count()).filter(|&i| d.sample_idle[i] != 0).map(|i| d.weight(i)).sum::<u64>()
                as f64,
            v8_log_samples: crate::formats::profiler_cost::v8_log_samples(d) as f64,
            threads_sampled: sampled.iter().filter(|&&s| s).count() as u32,
            threads_seen: d.threads.len() as u32,
            symbolicated: d.symbols.is_some(),
            stats: JsStats::from(&d.stats),
            processes: (0..d.process_count())
                .map(|p| {
                    let mut samples = 0u64;
                    let mut threads = vec![false; d.threads.len()];
                    for i in 0..d.sample_count() {
                        let t = d.sample_thread[i] as usize;
                        if d.process_of(t) == p {
                            samples += d.weight(i);
                            threads[t] = true;
                        }
                    }
                    let info = d.processes.get(p);
                    JsProcessSummary {
                        pid: info.map_or(d.meta.pid, |i| i.pid),
                        command: info.map_or(String::new(), |i| i.command.clone()),
                        samples: samples as f64,
                        threads: threads.iter().filter(|&&t| t).count() as u32,
                    }
                })
                .collect(),
        }
    }
}

/// A file {@link processProfileFile} wrote.
#[napi(object, js_name = "WrittenFile")]
pub struct JsWrittenFile {
    pub path: String,
    /// The process it holds, or 0 for all of the profile's processes.
    pub pid: u32,
}

/// What {@link processProfileFile} did.
#[napi(object, js_name = "ProcessedProfile")]
pub struct JsProcessedProfile {
    pub summary: JsProfileSummary,
    /// The format written to `job.output`, if any.
    pub format: Option<String>,
    /// The files written: `job.output` itself, or, for a profile of several
    /// processes in a format that holds one, `<stem>.<pid>.<ext>` for each
    /// process. Empty when there was nothing to draw (no samples; or, in a
    /// flame graph or collapsed stacks without `includeIdle`, only idle
    /// ones): no empty file is written.
    pub outputs: Vec<JsWrittenFile>,
    /// One report per entry of `job.reports`.
    pub reports: Vec<JsProfileReport>,
    /// What symbolization could not use (a corrupt symbol file, a broken
    /// source map), and JavaScript that could not be named, each once.
    pub warnings: Vec<String>,
}

const JOB_KEYS: &str = "symbolicate, symbols, output, stream, save, reports, commands, threadRoles";

fn string_list(v: &Unknown, what: &str) -> JsResult<Vec<String>> {
    if !v.is_array().unwrap_or(false) {
        return Err(einval(format!("{what} must be an array of strings")));
    }
    // SAFETY: checked to be an array just above.
    let list: Array = unsafe { v.cast() }.map_err(napi_fail)?;
    (0..list.get_array_length().map_err(napi_fail)?)
        .map(|i| string(&list.get_element::<Unknown>(i).map_err(napi_fail)?, &format!("{what}[{i}]")))
        .collect()
}

/// `<stem>.<pid>.<ext>` for `path` written in `format`.
fn per_process_path(path: &str, format: Format, pid: u32) -> String {
    let lower = path.to_ascii_lowercase();
    let ext = format.extensions_of().into_iter().find(|e| lower.ends_with(e));
    match ext {
        Some(e) => format!("{}.{pid}{}", &path[..path.len() - e.len()], &path[path.len() - e.len()..]),
        None => format!("{path}.{pid}"),
    }
}

/// Why a profile of several processes cannot go to one stream in a format
/// that holds one process a file.
fn one_process_only(data: &ProfileData, save: &SaveRequest, stream: bool) -> String {
    let pids: Vec<String> = data.processes.iter().map(|p| p.pid.to_string()).collect();
    let dest = if stream { "standard output".to_string() } else { format!("{}, a stream,", save.path) };
    format!(
        "the profile holds {} processes (pids {}) and a {} file holds one; {dest} takes one file: write to a regular \
         file (one per process, <name>.<pid>.<ext>), or use --format collapsed, firefox or machprof, which hold them all",
        data.process_count(),
        pids.join(", "),
        save.format.name(),
    )
}

/// Samples a file in `format` would draw (weights counted).
fn drawable(data: &ProfileData, save: &SaveRequest) -> u64 {
    let keep_idle = !save.format.is_aggregate() || save.options.include_idle;
    (0..data.sample_count()).filter(|&i| keep_idle || data.sample_idle[i] == 0).map(|i| data.weight(i)).sum()
}

/// Reads a `.machprof` file, or several (one per process, as `machsampler
/// record` leaves them when it followed child processes), and, in one
/// call, names their frames, merges them, writes them in another format and
/// computes reports: what `machsampler record`, `report` and `convert` do
/// with a profile, without moving it through JavaScript.
///
/// `job.symbolicate` names the frames when a profile has no names yet, from
/// the module files if they are still there and from the symbol path (names
/// that cannot be found stay addresses; V8's perf map is read only for a
/// profile recorded on this platform), and finds each thread's role.
/// `job.commands` gives each input's command line, `job.threadRoles` roles
/// the caller knows (`{ [tid]: 'worker 1 (/app/w.js)' }`). `job.output` is
/// the file to write, `job.save` its export options (`format` included);
/// `job.reports` a list of report options; `job.symbols` the symbol path
/// options (see {@link symbolicate}), with which a profile from another
/// platform is symbolicated too.
///
/// @throws as {@link loadProfile}, {@link saveProfile} and
///   {@link profileReport} do; nothing is written unless every option is
///   valid.
#[napi(ts_args_type = "input: string | string[], job?: ProfileJob", ts_return_type = "ProcessedProfile")]
pub fn process_profile_file(input: Unknown, job: Unknown) -> Result<JsProcessedProfile, &'static str> {
    let inputs = match input.is_array().unwrap_or(false) {
        true => string_list(&input, "input")?,
        false => vec![string(&input, "input")?],
    };
    if inputs.is_empty() {
        return Err(einval("input must name at least one profile file"));
    }
    let mut symbolicate = false;
    let mut output = None;
    let mut save = None;
    let mut reports = Vec::new();
    let mut symbol_options = None;
    let mut stream = false;
    let mut commands = Vec::new();
    let mut known_roles: Vec<(u64, String)> = Vec::new();
    for (key, val) in entries(job, "job")? {
        let what = format!("job.{key}");
        match key.as_str() {
            "symbolicate" => symbolicate = boolean(&val, &what)?,
            "symbols" => symbol_options = Some(super::symbols::symbol_options(val, &what)?),
            "output" => output = Some(val),
            "stream" => stream = boolean(&val, &what)?,
            "save" => save = Some(val),
            "commands" => commands = string_list(&val, &what)?,
            "threadRoles" => {
                for (tid, role) in entries(val, &what)? {
                    let n: u64 = tid.parse().map_err(|_| einval(format!("{what} keys must be tids, got '{tid}'")))?;
                    known_roles.push((n, string(&role, &format!("{what}.{tid}"))?));
                }
            }
            "reports" => {
                if !val.is_array().unwrap_or(false) {
                    return Err(einval(format!("{what} must be an array of report options")));
                }
                // SAFETY: checked to be an array just above.
                let list: Array = unsafe { val.cast() }.map_err(napi_fail)?;
                for i in 0..list.get_array_length().map_err(napi_fail)? {
                    reports.push(ReportRequest::parse(list.get_element::<Unknown>(i).map_err(napi_fail)?)?);
                }
            }
            _ => return Err(einval(format!("unknown option '{key}'; valid options are {JOB_KEYS}"))),
        }
    }
    let save = match (output, save) {
        (Some(o), save) => Some(SaveRequest::parse(&o, "job.output", save)?),
        (None, Some(_)) => return Err(einval("job.save needs job.output")),
        (None, None) if stream => return Err(einval("job.stream needs job.output")),
        (None, None) => None,
    };
    let mut parts = Vec::with_capacity(inputs.len());
    let mut warnings = Vec::new();
    for input in &inputs {
        let mut data = read_machprof(input)?;
        if symbolicate && data.symbols.is_none() {
            let mut options = match &symbol_options {
                Some(o) => o.clone(),
                None => super::symbols::default_symbol_options()?,
            };
            // A perf map here belongs to a local process, not to a profile
            // recorded on another platform that happens to have its pid.
            if data.meta.platform != crate::profile::Meta::current().platform {
                options.perf_map = Some(std::path::PathBuf::new());
            }
            let (symbols, w) = crate::symbols::symbolicate_with_warnings(&data, &options);
            data.symbols = Some(symbols);
            for w in w {
                if !warnings.contains(&w) {
                    warnings.push(w);
                }
            }
        }
        if symbolicate && (data.thread_roles.is_empty() || !known_roles.is_empty()) {
            let names = crate::formats::names::resolve(&data).into_owned();
            crate::profile::roles::assign(&mut data, &names, &known_roles);
        }
        parts.push(data);
    }
    let data = if parts.len() == 1 {
        let mut d = parts.pop().unwrap_or_default();
        if let (true, Some(c)) = (d.processes.is_empty(), commands.first()) {
            d.processes = vec![crate::profile::ProcessInfo { pid: d.meta.pid, command: c.clone() }];
        }
        d
    } else {
        crate::profile::merge::merge(parts, &commands).map_err(einval)?
    };
    if symbolicate {
        warnings.extend(crate::formats::warnings::unnamed_js(&data));
    }
    warnings.extend(crate::formats::warnings::cut_stacks(&data));
    warnings.extend(crate::formats::warnings::dropped_samples(&data));
    let mut outputs = Vec::new();
    if let Some(s) = &save {
        // A stream (a pipe, `/dev/stdout`) takes one file: collapsed stacks
        // of every process (their threads' labels carry the pid, unless
        // asked not to label threads), or an error for a format that holds
        // one process; never `<path>.<pid>` files nobody asked for.
        let one_file = stream || crate::formats::is_stream(Path::new(&s.path));
        let split = data.process_count() > 1 && !matches!(s.format, Format::Machprof | Format::Firefox);
        if split && one_file && !matches!(s.format, Format::Collapsed) {
            return Err(einval(one_process_only(&data, s, stream)));
        }
        if split && !one_file {
            for p in 0..data.process_count() {
                let one = crate::profile::merge::split(&data, p);
                if drawable(&one, s) == 0 {
                    continue;
                }
                let path = per_process_path(&s.path, s.format, one.meta.pid);
                SaveRequest { path: path.clone(), format: s.format, options: s.options.clone() }.write(&one)?;
                outputs.push(JsWrittenFile { path, pid: one.meta.pid });
            }
        } else if drawable(&data, s) > 0 {
            s.write(&data)?;
            outputs.push(JsWrittenFile {
                path: s.path.clone(),
                pid: if data.process_count() > 1 { 0 } else { data.meta.pid },
            });
        }
    }
    let reports = reports.iter().map(|r| r.run(&data)).collect::<JsResult<Vec<_>>>()?;
    Ok(JsProcessedProfile {
        summary: JsProfileSummary::of(&data),
        format: save.map(|s| s.format.name().to_string()),
        outputs,
        reports,
        warnings,
    })
}

/// Options for {@link processProfileFile}. Every field is optional.
// Only its type is used (for the .d.ts): the function validates by hand.
#[allow(dead_code)]
#[napi(object, js_name = "ProfileJob")]
pub struct JsProfileJob {
    /// Name the frames if the profile has no names yet.
    pub symbolicate: Option<bool>,
    /// Where symbol files are (see {@link symbolicate}).
    #[napi(ts_type = "SymbolOptions")]
    pub symbols: Option<super::symbols::JsSymbolOptions>,
    /// Also write the profile here (format by extension, or `save.format`).
    pub output: Option<String>,
    /// `output` stands for a stream (standard output, through a file of the
    /// caller's): one file, whatever the processes. A path that is not a
    /// regular file (a pipe, `/dev/stdout`) is taken as one without this.
    pub stream: Option<bool>,
    /// Export options for `output`.
    pub save: Option<JsExportOptions>,
    /// Reports to compute.
    pub reports: Option<Vec<JsReportOptions>>,
    /// The command line of each input, for the summary.
    pub commands: Option<Vec<String>>,
    /// Roles the caller knows better than the entry frames, by tid.
    #[napi(ts_type = "Record<string, string>")]
    pub thread_roles: Option<std::collections::HashMap<String, String>>,
}

/// Checks start options exactly as {@link start} does, without starting:
/// the CLI validates its options before it runs the program.
///
/// @throws `EINVAL` with start()'s message for a bad option.
#[napi(ts_args_type = "options?: StartOptions")]
pub fn check_start_options(options: Unknown) -> Result<(), &'static str> {
    super::parse_options(options).map(|_| ())
}
