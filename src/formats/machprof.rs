//! `.machprof`: machsampler's own file format, lossless, read back by
//! `loadProfile`, `machsampler report` and `machsampler convert`.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "MACHPROF"
//!      8     4  format version, u32 LE (this code writes 2, reads 1 and 2)
//!     12     4  flags, u32 LE: bit 0 = payload is gzip-compressed;
//!               other bits are reserved and must be 0
//!     16     8  payload length in bytes (uncompressed), u64 LE
//!     24     4  CRC-32 of the uncompressed payload, u32 LE
//!     28     …  payload (gzip member if flag 0 is set)
//! payload:
//!      0     4  header length H, u32 LE
//!      4     H  header, UTF-8 JSON: meta, threads, modules, times, stats,
//!               function table (if symbolicated), and the column list
//!    4+H     …  the columns, back to back, little-endian, in the order
//!               and with the element counts the header lists
//! ```
//!
//! The JSON header holds the small, irregular parts (strings, nested
//! records) and stays readable with `head -c`; the per-sample and per-frame
//! columns are raw arrays, so a million samples load with a few memcpys.
//! A reader rejects: another magic, another version, unknown flags, a
//! payload of the wrong length, a checksum mismatch, an unexpected column
//! list, and a profile that does not validate. Never a panic: every length
//! is checked before it is used.
//!
//! Compatibility: additions that old readers can ignore go in the JSON
//! header under new keys (unknown keys are ignored); anything else bumps
//! the version.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};

use crate::profile::StatsSnapshot;
use crate::profile::ThreadRecord;
use crate::profile::{stat_key, Function, FunctionKind, Meta, Module, ProcessInfo, ProfileData, Symbols};

pub const MAGIC: &[u8; 8] = b"MACHPROF";

/// A recorded mode this reader knows (`cpu`, `wall`); any other is read as
/// not recorded, so a file from a later version still opens.
fn known_mode(mode: String) -> String {
    if mode == "cpu" || mode == "wall" {
        mode
    } else {
        String::new()
    }
}
pub const VERSION: u32 = 2;
/// The oldest version this code reads. Version 1 has no
/// `samples.weight` column (every row is one sample).
pub const OLDEST_VERSION: u32 = 1;
const FLAG_GZIP: u32 = 1;
const PREAMBLE: usize = 28;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    meta: MetaJson,
    threads: Vec<ThreadJson>,
    modules: Vec<ModuleJson>,
    start_ns: u64,
    end_ns: u64,
    interval_ns: u64,
    /// `null` for a non-finite value, which JSON cannot hold.
    start_wall_ms: Option<f64>,
    stats: BTreeMap<String, u64>,
    /// The function table, if the profile was symbolicated.
    functions: Option<Vec<FunctionJson>>,
    /// Names of the JavaScript frames (addresses with the top bit set).
    #[serde(default)]
    js_names: Vec<String>,
    /// The processes, when the profile holds several (see `ProcessInfo`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    processes: Vec<ProcessJson>,
    columns: Vec<Column>,
}

#[derive(Serialize, Deserialize)]
struct ProcessJson {
    pid: u32,
    command: String,
}

#[derive(Serialize, Deserialize)]
struct MetaJson {
    platform: String,
    arch: String,
    pid: u32,
    /// Absent in files written before the mode was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    mode: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThreadJson {
    tid: u64,
    name: String,
    is_main: bool,
    /// Index into `processes` (absent: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    process: Option<u32>,
    /// What the thread runs (absent: not computed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    role: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModuleJson {
    path: String,
    start: u64,
    end: u64,
    bias: u64,
    build_id: String,
}

#[derive(Serialize, Deserialize)]
struct FunctionJson {
    name: String,
    module: i32,
    file: String,
    line: u32,
    kind: String,
}

#[derive(Serialize, Deserialize, PartialEq, Eq, Debug)]
struct Column {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    len: u64,
}

/// The columns of the current version, in file order. The last two exist
/// only in a symbolicated profile.
const COLUMNS: [(&str, &str); 11] = [
    ("samples.thread", "u32"),
    ("samples.timeNs", "u64"),
    ("samples.stack", "u32"),
    ("samples.idle", "u8"),
    ("samples.cpuDeltaNs", "u64"),
    ("samples.weight", "u32"),
    ("stacks.frame", "u32"),
    ("stacks.parent", "i32"),
    ("frames.address", "u64"),
    ("symbols.frameFunction", "u32"),
    ("symbols.frameLine", "u32"),
];

/// The columns a file of `version` has, with or without symbols.
fn columns_of(version: u32, symbols: bool) -> Vec<(&'static str, &'static str)> {
    let mut cols: Vec<_> = COLUMNS.iter().copied().filter(|&(n, _)| version >= 2 || n != "samples.weight").collect();
    if !symbols {
        cols.truncate(cols.len() - 2);
    }
    cols
}

/// The statistics, by the names the JS API uses. One list for both ways.
/// Fixed-size little-endian elements of the columns.
trait Le: Sized + Copy {
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
}

macro_rules! le {
    ($($t:ty),*) => {$(
        impl Le for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}
le!(u8, u32, i32, u64);

fn put_column<T: Le>(out: &mut Vec<u8>, values: &[T]) {
    out.reserve(values.len() * T::SIZE);
    for &v in values {
        v.put(out);
    }
}

/// Writes `profile` (which must validate) as a `.machprof` file.
pub fn encode(profile: &ProfileData, compress: bool) -> Vec<u8> {
    let symbols = profile.symbols.as_ref();
    let lens = [
        profile.sample_thread.len(),
        profile.sample_time_ns.len(),
        profile.sample_stack.len(),
        profile.sample_idle.len(),
        profile.sample_cpu_delta_ns.len(),
        profile.sample_weight.len(),
        profile.stack_frame.len(),
        profile.stack_parent.len(),
        profile.frame_address.len(),
        symbols.map_or(0, |s| s.frame_function.len()),
        symbols.map_or(0, |s| s.frame_line.len()),
    ];
    let ncols = if symbols.is_some() { 11 } else { 9 };
    let stats = profile.stats.clone();
    let header = Header {
        meta: MetaJson {
            platform: profile.meta.platform.clone(),
            arch: profile.meta.arch.clone(),
            pid: profile.meta.pid,
            mode: profile.meta.mode.clone(),
        },
        threads: profile
            .threads
            .iter()
            .enumerate()
            .map(|(i, t)| ThreadJson {
                tid: t.tid,
                name: t.name.clone(),
                is_main: t.is_main,
                process: profile.thread_process.get(i).copied(),
                role: profile.thread_roles.get(i).cloned(),
            })
            .collect(),
        modules: profile
            .modules
            .iter()
            .map(|m| ModuleJson {
                path: m.path.clone(),
                start: m.start,
                end: m.end,
                bias: m.bias,
                build_id: m.build_id.clone(),
            })
            .collect(),
        start_ns: profile.start_ns,
        end_ns: profile.end_ns,
        interval_ns: profile.interval_ns,
        start_wall_ms: profile.start_wall_ms.is_finite().then_some(profile.start_wall_ms),
        stats: stats.fields().into_iter().map(|(k, v)| (stat_key(k), v)).collect(),
        functions: symbols.map(|s| {
            s.functions
                .iter()
                .map(|f| FunctionJson {
                    name: f.name.clone(),
                    module: f.module,
                    file: f.file.clone(),
                    line: f.line,
                    kind: f.kind.as_str().to_string(),
                })
                .collect()
        }),
        js_names: profile.js_names.clone(),
        processes: profile.processes.iter().map(|p| ProcessJson { pid: p.pid, command: p.command.clone() }).collect(),
        columns: COLUMNS[..ncols]
            .iter()
            .zip(lens)
            .map(|(&(name, ty), len)| Column { name: name.into(), ty: ty.into(), len: len as u64 })
            .collect(),
    };
    // Serializing plain data cannot fail.
    let json = serde_json::to_vec(&header).unwrap_or_default();
    let mut payload = Vec::with_capacity(4 + json.len() + profile.sample_count() * 25);
    payload.extend_from_slice(&(json.len() as u32).to_le_bytes());
    payload.extend_from_slice(&json);
    put_column(&mut payload, &profile.sample_thread);
    put_column(&mut payload, &profile.sample_time_ns);
    put_column(&mut payload, &profile.sample_stack);
    put_column(&mut payload, &profile.sample_idle);
    put_column(&mut payload, &profile.sample_cpu_delta_ns);
    put_column(&mut payload, &profile.sample_weight);
    put_column(&mut payload, &profile.stack_frame);
    put_column(&mut payload, &profile.stack_parent);
    put_column(&mut payload, &profile.frame_address);
    if let Some(s) = symbols {
        put_column(&mut payload, &s.frame_function);
        put_column(&mut payload, &s.frame_line);
    }

    let mut out = Vec::with_capacity(PREAMBLE + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(if compress { FLAG_GZIP } else { 0 }).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    if compress {
        // Fast compression: profiles are mostly small integers and
        // repeated timestamps, where level 1 gets most of the gain.
        let mut gz = GzEncoder::new(out, Compression::fast());
        // Writing to a Vec cannot fail.
        let _ = gz.write_all(&payload);
        gz.finish().unwrap_or_default()
    } else {
        out.extend_from_slice(&payload);
        out
    }
}

/// True if `bytes` start like a `.machprof` file (for a clearer error when
/// some other file is given).
pub fn looks_like(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Reads a `.machprof` file. The error says what is wrong, in words.
pub fn decode(bytes: &[u8]) -> Result<ProfileData, String> {
    let n = bytes.len().min(MAGIC.len());
    if bytes[..n] != MAGIC[..n] {
        return Err("not a machsampler profile (it does not start with \"MACHPROF\")".into());
    }
    if bytes.len() < PREAMBLE {
        return Err(format!("truncated: {} bytes, shorter than the {PREAMBLE}-byte file header", bytes.len()));
    }
    let u32_at = |o: usize| u32::get(&bytes[o..o + 4]);
    let version = u32_at(8);
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(if version > VERSION {
            format!("format version {version} is newer than this machsampler reads (versions {OLDEST_VERSION} to {VERSION}); upgrade machsampler")
        } else {
            format!("unknown format version {version} (this machsampler reads versions {OLDEST_VERSION} to {VERSION})")
        });
    }
    let flags = u32_at(12);
    if flags & !FLAG_GZIP != 0 {
        return Err(format!("unknown flags 0x{flags:x} in a version {version} file"));
    }
    let payload_len = u64::get(&bytes[16..24]);
    let crc = u32_at(24);
    let body = &bytes[PREAMBLE..];
    let inflated;
    let payload: &[u8] = if flags & FLAG_GZIP != 0 {
        let mut buf = Vec::new();
        // `take` bounds the output by what the header promises (plus one
        // byte, to notice more), so a corrupt stream cannot balloon.
        GzDecoder::new(body)
            .take(payload_len.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| format!("corrupt or truncated compressed data: {e}"))?;
        inflated = buf;
        &inflated
    } else {
        body
    };
    if payload.len() as u64 != payload_len {
        return Err(format!(
            "truncated or corrupt: payload is {} bytes, the file header says {payload_len}",
            payload.len()
        ));
    }
    if crc32fast::hash(payload) != crc {
        return Err("corrupt: checksum mismatch".into());
    }
    parse_payload(payload, version)
}

fn parse_payload(payload: &[u8], version: u32) -> Result<ProfileData, String> {
    let corrupt = |what: String| format!("corrupt: {what}");
    if payload.len() < 4 {
        return Err(corrupt("no header".into()));
    }
    let hlen = u32::get(&payload[..4]) as usize;
    let end = hlen.saturating_add(4);
    let json = payload.get(4..end).ok_or_else(|| corrupt(format!("header length {hlen} is past the end")))?;
    let h: Header = serde_json::from_slice(json).map_err(|e| corrupt(format!("header: {e}")))?;

    let expected = columns_of(version, h.functions.is_some());
    let names_ok = h.columns.len() == expected.len()
        && h.columns.iter().zip(&expected).all(|(c, &(name, ty))| c.name == name && c.ty == ty);
    if !names_ok {
        let found: Vec<_> = h.columns.iter().map(|c| c.name.as_str()).collect();
        return Err(corrupt(format!("unexpected columns [{}]", found.join(", "))));
    }
    let mut rest = &payload[end..];
    let mut need: u64 = 0;
    for (c, &(_, ty)) in h.columns.iter().zip(&expected) {
        let size = match ty {
            "u8" => 1,
            "u32" | "i32" => 4,
            _ => 8,
        };
        need =
            c.len.checked_mul(size).and_then(|b| need.checked_add(b)).ok_or_else(|| corrupt("column sizes".into()))?;
    }
    if need != rest.len() as u64 {
        return Err(corrupt(format!("the columns need {need} bytes, the file has {}", rest.len())));
    }
    let mut lens = h.columns.iter().map(|c| c.len as usize);
    // Lengths were checked against the bytes present just above.
    let mut take = |size: usize| {
        let n = lens.next().unwrap_or(0) * size;
        let (col, tail) = rest.split_at(n);
        rest = tail;
        col
    };
    fn col<T: Le>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(T::SIZE).map(T::get).collect()
    }
    let sample_thread = col::<u32>(take(4));
    let sample_time_ns = col::<u64>(take(8));
    let sample_stack = col::<u32>(take(4));
    let sample_idle = take(1).to_vec();
    let sample_cpu_delta_ns = col::<u64>(take(8));
    let sample_weight = if version >= 2 { col::<u32>(take(4)) } else { vec![1; sample_thread.len()] };
    let stack_frame = col::<u32>(take(4));
    let stack_parent = col::<i32>(take(4));
    let frame_address = col::<u64>(take(8));
    let symbols = match h.functions {
        None => None,
        Some(fs) => {
            let frame_function = col::<u32>(take(4));
            let frame_line = col::<u32>(take(4));
            let functions = fs
                .into_iter()
                .map(|f| {
                    let kind =
                        FunctionKind::parse(&f.kind).ok_or_else(|| corrupt(format!("function kind '{}'", f.kind)))?;
                    Ok(Function { name: f.name, module: f.module, file: f.file, line: f.line, kind })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Some(Symbols { frame_function, frame_line, functions })
        }
    };
    let mut stats = StatsSnapshot::default();
    for (k, v) in stats.fields_mut() {
        *v = h.stats.get(&stat_key(k)).copied().unwrap_or(0);
    }
    let thread_process = if h.threads.iter().any(|t| t.process.is_some()) {
        h.threads.iter().map(|t| t.process.unwrap_or(0)).collect()
    } else {
        Vec::new()
    };
    let thread_roles = if h.threads.iter().any(|t| t.role.is_some()) {
        h.threads.iter().map(|t| t.role.clone().unwrap_or_default()).collect()
    } else {
        Vec::new()
    };
    let profile = ProfileData {
        meta: Meta { platform: h.meta.platform, arch: h.meta.arch, pid: h.meta.pid, mode: known_mode(h.meta.mode) },
        threads: h.threads.into_iter().map(|t| ThreadRecord { tid: t.tid, name: t.name, is_main: t.is_main }).collect(),
        processes: h.processes.into_iter().map(|p| ProcessInfo { pid: p.pid, command: p.command }).collect(),
        thread_process,
        thread_roles,
        sample_thread,
        sample_time_ns,
        sample_stack,
        sample_idle,
        sample_cpu_delta_ns,
        sample_weight,
        stack_frame,
        stack_parent,
        frame_address,
        modules: h
            .modules
            .into_iter()
            .map(|m| Module { path: m.path, start: m.start, end: m.end, bias: m.bias, build_id: m.build_id })
            .collect(),
        start_ns: h.start_ns,
        end_ns: h.end_ns,
        interval_ns: h.interval_ns,
        start_wall_ms: h.start_wall_ms.unwrap_or(f64::NAN),
        stats,
        symbols,
        js_names: h.js_names,
    };
    profile.validate().map_err(corrupt)?;
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use proptest::prelude::*;

    /// `ProfileData` has no `PartialEq` (it holds an f64); its Debug text
    /// covers every field, bit for bit for the integers.
    fn same(a: &ProfileData, b: &ProfileData) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    #[test]
    fn round_trips_losslessly_with_and_without_symbols_and_compression() {
        let mut p = sample_profile();
        p.stats.samples_captured = 4;
        p.stats.delivery_max_ns = u64::MAX;
        // The largest address, and a JavaScript frame named by V8.
        p.frame_address[0] = crate::profile::JS_FRAME_TAG - 1;
        p.frame_address[1] = crate::profile::JS_FRAME_TAG;
        p.js_names = vec!["JS:*fib /app/fib.js:3:13".into()];
        // A tagged address without a name is kept as it is.
        p.frame_address[2] = crate::profile::JS_FRAME_TAG | 7;
        p.modules[0].end = u64::MAX;
        p.meta.mode = "cpu".into();
        for symbols in [true, false] {
            if !symbols {
                p.symbols = None;
            }
            for compress in [true, false] {
                let bytes = encode(&p, compress);
                assert!(looks_like(&bytes));
                let q = decode(&bytes).unwrap();
                assert!(same(&p, &q), "symbols {symbols} compress {compress}");
            }
        }
        let empty = ProfileData::default();
        assert!(same(&empty, &decode(&encode(&empty, true)).unwrap()));
    }

    #[test]
    fn rejects_other_files_versions_and_flags() {
        let good = encode(&sample_profile(), false);
        assert!(decode(b"{\"nodes\":[]}").unwrap_err().contains("not a machsampler profile"));
        assert!(decode(b"").unwrap_err().contains("truncated"));
        assert!(decode(b"MACH").unwrap_err().contains("truncated"));
        let mut v3 = good.clone();
        v3[8] = 3;
        let e = decode(&v3).unwrap_err();
        assert!(e.contains("format version 3 is newer") && e.contains("versions 1 to 2"), "{e}");
        let mut v0 = good.clone();
        v0[8] = 0;
        assert!(decode(&v0).unwrap_err().contains("unknown format version 0"));
        let mut flags = good.clone();
        flags[12] = 4;
        assert!(decode(&flags).unwrap_err().contains("unknown flags"));
    }

    #[test]
    fn every_truncation_is_an_error() {
        for compress in [false, true] {
            let good = encode(&sample_profile(), compress);
            for n in 0..good.len() {
                assert!(decode(&good[..n]).is_err(), "compress {compress}: {n} of {} bytes accepted", good.len());
            }
        }
    }

    #[test]
    fn a_consistent_but_invalid_profile_is_rejected() {
        // Right checksum, wrong content: the validation catches it.
        let mut p = sample_profile();
        p.sample_stack[0] = 99;
        let bytes = encode(&p, false);
        assert!(decode(&bytes).unwrap_err().contains("corrupt: sample 0 names stack 99"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any flipped byte of an uncompressed file is caught (magic,
        /// version, flags, length, checksum, or the checksummed payload).
        #[test]
        fn flipped_bytes_are_caught(pos in any::<prop::sample::Index>(), xor in 1u8..=255) {
            let mut bytes = encode(&sample_profile(), false);
            let i = pos.index(bytes.len());
            bytes[i] ^= xor;
            prop_assert!(decode(&bytes).is_err());
        }

        /// In a compressed file a few gzip header bytes (mtime, OS) are not
        /// checked by anyone, so a flip may pass; then nothing changed.
        #[test]
        fn compressed_damage_never_panics_or_misreads(pos in any::<prop::sample::Index>(), xor in 1u8..=255,
                                                       cut in any::<prop::sample::Index>()) {
            let p = sample_profile();
            let mut bytes = encode(&p, true);
            let i = pos.index(bytes.len());
            bytes[i] ^= xor;
            bytes.truncate(bytes.len() - cut.index(3));
            if let Ok(q) = decode(&bytes) {
                prop_assert!(same(&p, &q));
            }
        }

        /// Random bytes behind a valid preamble never panic.
        #[test]
        fn garbage_payloads_never_panic(tail in prop::collection::vec(any::<u8>(), 0..256), gz in any::<bool>()) {
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&VERSION.to_le_bytes());
            bytes.extend_from_slice(&(if gz { FLAG_GZIP } else { 0 }).to_le_bytes());
            bytes.extend_from_slice(&(tail.len() as u64).to_le_bytes());
            bytes.extend_from_slice(&crc32fast::hash(&tail).to_le_bytes());
            bytes.extend_from_slice(&tail);
            let _ = decode(&bytes);
        }
    }
}
