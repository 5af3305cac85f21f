//! pprof: `profile.proto` (github.com/google/pprof/proto/profile.proto),
//! gzipped, as `go tool pprof` and most continuous profilers read it.
//!
//! Encoded by hand with a small protobuf writer: the schema is a dozen
//! fields of varints, strings and sub-messages, and a code generator would
//! add a build step and a dependency for that.
//!
//! - Sample types: `samples/count`, then, for a profile recorded in CPU
//!   mode, `cpu/nanoseconds` (samples times the interval, which is CPU
//!   time there) and a `cpu` period; otherwise `wall/nanoseconds` (samples
//!   times the interval) and, when the platform measured any,
//!   `cpu/nanoseconds` (the thread's CPU time since its previous sample),
//!   with a `wall` period. The default sample type is CPU when present, so
//!   `pprof -top` shows where the CPU went.
//! - Samples are aggregated by (thread, stack, idle) and carry labels
//!   `thread` (name), `tid` (number) and `state` (`running` or `idle`), so
//!   `-tagfocus thread=…` or `-tagignore state=idle` select them.
//! - A mapping per module, with its path and build id; a location per frame
//!   with its address and (function, line); JIT frames have no mapping.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use rustc_hash::FxHashMap;

use super::names::resolve;
use crate::profile::{FunctionKind, ProfileData};

/// A protobuf message being written. Only what profile.proto needs:
/// varint fields (wire type 0) and length-delimited ones (wire type 2).
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(((field as u64) << 3) | wire as u64);
    }

    /// A uint64/int64 field; zero is the default and is not written.
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }

    fn int(&mut self, field: u32, v: i64) {
        // int64 is encoded as the two's-complement u64 (not zig-zag).
        self.uint(field, v as u64);
    }

    fn bool(&mut self, field: u32, v: bool) {
        self.uint(field, v as u64);
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn message(&mut self, field: u32, m: Pb) {
        self.bytes(field, &m.0);
    }

    /// A packed repeated varint field.
    fn packed(&mut self, field: u32, values: impl IntoIterator<Item = u64>) {
        let mut inner = Pb::default();
        for v in values {
            inner.varint(v);
        }
        if !inner.0.is_empty() {
            self.bytes(field, &inner.0);
        }
    }
}

/// The string table: index 0 must be "".
struct Strings {
    index: FxHashMap<String, i64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings { index: FxHashMap::default(), list: Vec::new() };
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as i64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn value_type(strings: &mut Strings, ty: &str, unit: &str) -> Pb {
    let mut m = Pb::default();
    m.int(1, strings.get(ty));
    m.int(2, strings.get(unit));
    m
}

pub fn export(profile: &ProfileData) -> Vec<u8> {
    let symbols = resolve(profile);
    let cpu_time = profile.meta.is_cpu_time();
    let has_cpu = !cpu_time && profile.sample_cpu_delta_ns.iter().any(|&d| d > 0);
    let mut strings = Strings::new();
    let mut out = Pb::default();

    // Field 1: sample types.
    let timed = if cpu_time { "cpu" } else { "wall" };
    let mut types = vec![("samples", "count"), (timed, "nanoseconds")];
    if has_cpu {
        types.push(("cpu", "nanoseconds"));
    }
    for (ty, unit) in &types {
        let vt = value_type(&mut strings, ty, unit);
        out.message(1, vt);
    }

    // Field 2: samples, aggregated by (thread, stack, idle).
    let mut agg: FxHashMap<(u32, u32, u8), [u64; 2]> = FxHashMap::default();
    for i in 0..profile.sample_count() {
        let key = (profile.sample_thread[i], profile.sample_stack[i], profile.sample_idle[i]);
        let e = agg.entry(key).or_default();
        e[0] += profile.weight(i);
        e[1] += profile.sample_cpu_delta_ns[i];
    }
    let mut keys: Vec<_> = agg.keys().copied().collect();
    keys.sort_unstable(); // stable output
    let (k_thread, k_tid, k_state) = (strings.get("thread"), strings.get("tid"), strings.get("state"));
    let (s_running, s_idle) = (strings.get("running"), strings.get("idle"));
    // The name the summary and the other formats show (`worker 1 (…)`,
    // `libuv pool`), not the OS name every Node thread may share.
    let thread_names: Vec<i64> =
        (0..profile.threads.len()).map(|t| strings.get(crate::profile::roles::display_name(profile, t))).collect();
    for key in keys {
        let (thread, stack, idle) = key;
        let [count, cpu] = agg[&key];
        let mut s = Pb::default();
        // Location ids are frame index + 1, leaf first as pprof expects.
        s.packed(1, profile.stack_frames(stack).map(|f| f as u64 + 1));
        let mut values = vec![count, count.saturating_mul(profile.interval_ns)];
        if has_cpu {
            values.push(cpu);
        }
        s.packed(2, values);
        let t = &profile.threads[thread as usize];
        let mut l = Pb::default();
        l.int(1, k_thread);
        l.int(2, thread_names[thread as usize]);
        s.message(3, l);
        let mut l = Pb::default();
        l.int(1, k_tid);
        l.int(3, t.tid as i64);
        s.message(3, l);
        let mut l = Pb::default();
        l.int(1, k_state);
        l.int(2, if idle != 0 { s_idle } else { s_running });
        s.message(3, l);
        out.message(2, s);
    }

    // Only the frames and functions the samples use: one process's share of
    // a profile of several keeps the tables of all of them.
    let mut node_used = vec![false; profile.stack_frame.len()];
    let mut frame_used = vec![false; profile.frame_address.len()];
    for &stack in &profile.sample_stack {
        let mut node = stack as usize;
        while node_used.get(node) == Some(&false) {
            node_used[node] = true;
            if let Some(used) = profile.stack_frame.get(node).and_then(|&f| frame_used.get_mut(f as usize)) {
                *used = true;
            }
            let Some(parent) = profile.stack_parent.get(node).and_then(|&p| usize::try_from(p).ok()) else { break };
            node = parent;
        }
    }
    let mut function_used = vec![false; symbols.functions.len()];
    for (frame, &func) in symbols.frame_function.iter().enumerate() {
        if frame_used[frame] {
            function_used[func as usize] = true;
        }
    }

    // Field 3: mappings, id = module index + 1, with what symbolization
    // found in each (pprof uses the flags to decide whether to re-symbolize).
    let mut found = vec![(false, false, false); profile.modules.len()];
    for (frame, &func) in symbols.frame_function.iter().enumerate().filter(|&(frame, _)| frame_used[frame]) {
        let f = &symbols.functions[func as usize];
        if let Some(e) = usize::try_from(f.module).ok().and_then(|m| found.get_mut(m)) {
            e.0 |= f.kind != FunctionKind::Unknown;
            e.1 |= !f.file.is_empty();
            e.2 |= symbols.frame_line[frame] > 0;
        }
    }
    for (i, m) in profile.modules.iter().enumerate() {
        let mut pm = Pb::default();
        pm.uint(1, i as u64 + 1);
        pm.uint(2, m.start);
        pm.uint(3, m.end);
        pm.int(5, strings.get(&m.path));
        pm.int(6, strings.get(&m.build_id));
        pm.bool(7, found[i].0);
        pm.bool(8, found[i].1);
        pm.bool(9, found[i].2);
        out.message(3, pm);
    }

    // Field 4: locations, id = frame index + 1.
    for (i, &addr) in profile.frame_address.iter().enumerate().filter(|&(i, _)| frame_used[i]) {
        let func = symbols.frame_function[i];
        let mut loc = Pb::default();
        loc.uint(1, i as u64 + 1);
        let module = symbols.functions[func as usize].module;
        if module >= 0 {
            loc.uint(2, module as u64 + 1);
        }
        loc.uint(3, addr);
        // A JS frame's line is where its function starts (V8 names only
        // that); a native frame's is the one its debug info gives.
        let f = &symbols.functions[func as usize];
        let (line_no, column) = match (symbols.frame_line[i], f.kind) {
            (0, FunctionKind::Js) => (f.line, f.column()),
            (l, _) => (l, 0),
        };
        let mut line = Pb::default();
        line.uint(1, func as u64 + 1);
        line.int(2, line_no as i64);
        line.int(3, column as i64);
        loc.message(4, line);
        out.message(4, loc);
    }

    // Field 5: functions, id = function index + 1.
    for (i, f) in symbols.functions.iter().enumerate().filter(|&(i, _)| function_used[i]) {
        let mut pf = Pb::default();
        pf.uint(1, i as u64 + 1);
        let name = strings.get(&f.name);
        pf.int(2, name);
        pf.int(3, name);
        pf.int(4, strings.get(&f.file));
        pf.int(5, f.line as i64);
        out.message(5, pf);
    }

    // Fields 9-12 and 14: time, duration, period, default sample type.
    let time_nanos = (profile.start_wall_ms * 1e6) as i64;
    let period_type = value_type(&mut strings, timed, "nanoseconds");
    let default_type = strings.get(if has_cpu { "cpu" } else { timed });
    let comment = strings.get("recorded by machsampler");

    // Field 6: the string table, now complete.
    for s in &strings.list {
        out.bytes(6, s.as_bytes());
    }
    out.int(9, time_nanos);
    out.int(10, profile.end_ns.saturating_sub(profile.start_ns) as i64);
    out.message(11, period_type);
    out.int(12, profile.interval_ns as i64);
    out.packed(13, [comment as u64]);
    out.int(14, default_type);

    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&out.0);
    gz.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use std::io::Read;

    /// A minimal protobuf reader, enough to check the writer's output.
    fn fields(mut b: &[u8]) -> Vec<(u32, u64, Vec<u8>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let mut v = 0u64;
            for shift in (0..64).step_by(7) {
                let byte = b[0];
                *b = &b[1..];
                v |= ((byte & 0x7f) as u64) << shift;
                if byte < 0x80 {
                    break;
                }
            }
            v
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let (field, wire) = ((key >> 3) as u32, key & 7);
            if wire == 0 {
                out.push((field, varint(&mut b), Vec::new()));
            } else {
                let len = varint(&mut b) as usize;
                out.push((field, 0, b[..len].to_vec()));
                b = &b[len..];
            }
        }
        out
    }

    #[test]
    fn varints_and_negative_ints() {
        let mut p = Pb::default();
        p.varint(300);
        assert_eq!(p.0, [0xac, 0x02]);
        let mut p = Pb::default();
        p.int(1, -1);
        assert_eq!(p.0.len(), 1 + 10);
    }

    #[test]
    fn profile_has_samples_strings_and_types() {
        let p = sample_profile();
        let gz = export(&p);
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        let f = fields(&raw);
        let strings: Vec<String> =
            f.iter().filter(|x| x.0 == 6).map(|x| String::from_utf8(x.2.clone()).unwrap()).collect();
        assert_eq!(strings[0], "");
        for s in ["samples", "wall", "cpu", "main", "worker", "b", "/bin/app", "ab", "thread", "tid"] {
            assert!(strings.iter().any(|x| x == s), "{s} missing");
        }
        assert_eq!(f.iter().filter(|x| x.0 == 1).count(), 3, "three sample types");
        // Four samples fall into three (thread, stack, idle) groups.
        assert_eq!(f.iter().filter(|x| x.0 == 2).count(), 3);
        assert_eq!(f.iter().filter(|x| x.0 == 4).count(), 4, "a location per frame");
        assert_eq!(f.iter().filter(|x| x.0 == 5).count(), 4, "a function per function");
        let total: u64 = f
            .iter()
            .filter(|x| x.0 == 2)
            .map(|x| {
                let values = fields(&x.2).into_iter().find(|y| y.0 == 2).unwrap().2;
                values[0] as u64 // first packed varint: the count (< 128 here)
            })
            .sum();
        assert_eq!(total, 4);
    }

    #[test]
    fn only_the_frames_and_functions_samples_use_are_written() {
        // Frame 3 (function c) is on stack 3 alone; no sample is left there.
        let mut p = sample_profile();
        p.sample_stack = vec![2, 2, 1, 1];
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&export(&p)[..]).read_to_end(&mut raw).unwrap();
        let f = fields(&raw);
        assert_eq!(f.iter().filter(|x| x.0 == 4).count(), 3, "locations of frames 0-2");
        assert_eq!(f.iter().filter(|x| x.0 == 5).count(), 3, "functions main, a, b");
        let strings: Vec<String> =
            f.iter().filter(|x| x.0 == 6).map(|x| String::from_utf8(x.2.clone()).unwrap()).collect();
        assert!(!strings.iter().any(|x| x == "c"));
    }

    /// The sample types and the period type, as (type, unit) strings.
    fn types(p: &ProfileData) -> (Vec<String>, String) {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&export(p)[..]).read_to_end(&mut raw).unwrap();
        let f = fields(&raw);
        let strings: Vec<String> =
            f.iter().filter(|x| x.0 == 6).map(|x| String::from_utf8(x.2.clone()).unwrap()).collect();
        let name = |m: &[u8]| {
            let v = fields(m);
            format!("{}/{}", strings[v[0].1 as usize], strings[v[1].1 as usize])
        };
        let sample_types = f.iter().filter(|x| x.0 == 1).map(|x| name(&x.2)).collect();
        let period = f.iter().find(|x| x.0 == 11).map(|x| name(&x.2)).unwrap();
        (sample_types, period)
    }

    #[test]
    fn cpu_mode_samples_are_cpu_time_not_wall_time() {
        let mut p = sample_profile();
        p.meta.mode = "cpu".into();
        assert_eq!(types(&p), (vec!["samples/count".into(), "cpu/nanoseconds".into()], "cpu/nanoseconds".into()));
        p.meta.mode = "wall".into();
        let wall = vec!["samples/count".into(), "wall/nanoseconds".into(), "cpu/nanoseconds".into()];
        assert_eq!(types(&p), (wall.clone(), "wall/nanoseconds".into()));
        // Not recorded (older files): as wall mode.
        p.meta.mode.clear();
        assert_eq!(types(&p), (wall, "wall/nanoseconds".into()));
    }
}
