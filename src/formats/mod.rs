//! Exporters: a `ProfileData` written in the formats people open, plus
//! machsampler's own lossless `.machprof`, which is also read back.
//!
//! | format       | file name                 | what it holds                                   |
//! |--------------|---------------------------|-------------------------------------------------|
//! | `machprof`   | `.machprof`               | everything, losslessly (see `machprof.rs`)      |
//! | `pprof`      | `.pb.gz`, `.pprof`        | aggregated stacks, wall + CPU time, per thread  |
//! | `speedscope` | `.speedscope.json`        | one sampled profile per thread                  |
//! | `firefox`    | `.fxprof.json`            | Firefox Profiler processed format, per thread   |
//! | `cpuprofile` | `.cpuprofile`             | Chrome DevTools / VS Code, main thread          |
//! | `collapsed`  | `.collapsed`, `.folded`   | `root;…;leaf count` lines                       |
//! | `html`       | `.html`, `.htm`           | self-contained flame graph page (search, zoom)  |
//! | `svg`        | `.svg`                    | the same flame graph as a bare SVG              |
//!
//! Names come from `profile.symbols` when the profile has been symbolicated,
//! otherwise every frame is its own function named by its `0x…` address
//! (see `names.rs`). Exporting never symbolicates: that reads module files
//! and the perf map, which only the caller knows are still there.
//!
//! # Idle samples
//! The sampler records an idle thread's previous stack again, marked idle,
//! without stopping it. Those samples are real wall-clock samples, so the
//! timeline formats (machprof, pprof, speedscope, firefox, cpuprofile) keep
//! all of them, and carry CPU time where the format can (pprof has a
//! `cpu/nanoseconds` value and a `state` label, Firefox a CPU delta). The
//! aggregated views (collapsed stacks, flame graphs, the report) answer
//! "where does the CPU go", and a thread blocked in `epoll_wait` for the
//! whole run would otherwise dwarf the work; they leave idle samples out
//! unless `include_idle` is set.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::profile::ProfileData;

mod collapsed;
mod cpuprofile;
mod firefox;
mod flamegraph;
pub mod machprof;
pub mod names;
mod pprof;
pub mod profiler_cost;
pub mod report;
mod speedscope;
pub mod stall_summary;
pub mod tree;
pub mod view;
pub mod warnings;

pub use view::View;

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Machprof,
    Pprof,
    Speedscope,
    Firefox,
    Cpuprofile,
    Collapsed,
    FlamegraphHtml,
    FlamegraphSvg,
}

/// File-name endings, longest first within a format so that
/// `x.speedscope.json` is not mistaken for something shorter.
const EXTENSIONS: &[(&str, Format)] = &[
    (".machprof", Format::Machprof),
    (".pb.gz", Format::Pprof),
    (".pprof", Format::Pprof),
    (".speedscope.json", Format::Speedscope),
    (".fxprof.json", Format::Firefox),
    (".cpuprofile", Format::Cpuprofile),
    (".collapsed", Format::Collapsed),
    (".folded", Format::Collapsed),
    (".html", Format::FlamegraphHtml),
    (".htm", Format::FlamegraphHtml),
    (".svg", Format::FlamegraphSvg),
];

impl Format {
    pub const ALL: [Format; 8] = [
        Format::Machprof,
        Format::Pprof,
        Format::Speedscope,
        Format::Firefox,
        Format::Cpuprofile,
        Format::Collapsed,
        Format::FlamegraphHtml,
        Format::FlamegraphSvg,
    ];

    /// The name used by `--format` and the JS API.
    pub fn name(self) -> &'static str {
        match self {
            Format::Machprof => "machprof",
            Format::Pprof => "pprof",
            Format::Speedscope => "speedscope",
            Format::Firefox => "firefox",
            Format::Cpuprofile => "cpuprofile",
            Format::Collapsed => "collapsed",
            Format::FlamegraphHtml => "html",
            Format::FlamegraphSvg => "svg",
        }
    }

    /// Every file-name ending that implies this format, the usual one first.
    pub fn extensions_of(self) -> Vec<&'static str> {
        EXTENSIONS.iter().filter(|(_, f)| *f == self).map(|(e, _)| *e).collect()
    }

    /// Other names `parse` accepts for this format.
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            Format::FlamegraphHtml => &["flamegraph"],
            _ => &[],
        }
    }

    /// What the format is, and what opens it.
    pub fn description(self) -> &'static str {
        match self {
            Format::Machprof => "lossless; what 'report' and 'convert' read",
            Format::Pprof => "go tool pprof, and profilers that read pprof",
            Format::Speedscope => "speedscope (one profile per thread)",
            Format::Firefox => "Firefox Profiler (profiler.firefox.com)",
            Format::Cpuprofile => "Chrome DevTools / VS Code (main thread)",
            Format::Collapsed => "folded stacks for flamegraph.pl / inferno",
            Format::FlamegraphHtml => "flame graph page with search and zoom",
            Format::FlamegraphSvg => "the same flame graph as an SVG",
        }
    }

    /// The usual file-name ending.
    pub fn extension(self) -> &'static str {
        EXTENSIONS.iter().find(|(_, f)| *f == self).map(|(e, _)| *e).unwrap_or("")
    }

    /// Parses a format name; `flamegraph` is an alias of `html`.
    pub fn parse(name: &str) -> Option<Format> {
        let name = name.to_ascii_lowercase();
        Format::ALL.into_iter().find(|f| f.name() == name || f.aliases().contains(&name.as_str()))
    }

    /// The format a file name implies, by its ending (case-insensitive).
    pub fn from_path(path: &str) -> Option<Format> {
        let lower = path.to_ascii_lowercase();
        EXTENSIONS.iter().find(|(ext, _)| lower.ends_with(ext)).map(|(_, f)| *f)
    }

    /// "machprof, pprof, …" for error messages.
    pub fn names() -> String {
        Format::ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
    }

    /// ".machprof, .pb.gz, …" for error messages.
    pub fn extensions() -> String {
        EXTENSIONS.iter().map(|(e, _)| *e).collect::<Vec<_>>().join(", ")
    }

    /// Whether the format aggregates samples into one view, where idle
    /// samples are left out by default (see the module docs).
    pub fn is_aggregate(self) -> bool {
        matches!(self, Format::Collapsed | Format::FlamegraphHtml | Format::FlamegraphSvg)
    }
}

/// Options that some formats honour; the others ignore them.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Keep idle samples in the aggregated views (collapsed, flame graphs).
    /// The timeline formats always keep them.
    pub include_idle: bool,
    /// Start every collapsed stack / flame graph tower with its thread
    /// (`name (tid)`), so threads are not merged. Default true.
    pub thread_prefix: bool,
    /// gzip the `.machprof` payload. Default true; the CLI's hand-off file
    /// from the profiled process is written uncompressed for speed.
    pub compress: bool,
    /// Which frames to show (see `view.rs`); `.machprof` is always whole.
    pub view: View,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions { include_idle: false, thread_prefix: true, compress: true, view: View::Mixed }
    }
}

/// `export_with` and default options.
pub fn export(profile: &ProfileData, format: Format) -> Result<Vec<u8>, String> {
    export_with(profile, format, &ExportOptions::default())
}

/// Writes `profile` in `format`. Fails only on a profile that does not
/// validate (every exporter indexes tables without further checks).
pub fn export_with(profile: &ProfileData, format: Format, opts: &ExportOptions) -> Result<Vec<u8>, String> {
    profile.validate()?;
    let viewed = match format {
        Format::Machprof => std::borrow::Cow::Borrowed(profile),
        _ => view::apply(profile, opts.view),
    };
    let profile = viewed.as_ref();
    let out = match format {
        Format::Machprof => machprof::encode(profile, opts.compress),
        Format::Pprof => pprof::export(profile),
        Format::Speedscope => speedscope::export(profile),
        Format::Firefox => firefox::export(profile),
        Format::Cpuprofile => cpuprofile::export(profile),
        Format::Collapsed => collapsed::export(profile, opts).into_bytes(),
        Format::FlamegraphHtml => flamegraph::export(profile, opts, true)?,
        Format::FlamegraphSvg => flamegraph::export(profile, opts, false)?,
    };
    Ok(out)
}

/// Writes `bytes` to `path`, through any symbolic links:
/// - a regular file (or a new one) is replaced atomically: a temporary file
///   in the same directory, then a rename, so a failure never leaves a
///   partial file, and a link to it stays a link;
/// - a special file (a pipe, a terminal, `/dev/stdout`, a socket) is
///   written to as a stream, never replaced;
/// - a directory is an error.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")),
        Ok(m) if !m.is_file() => {
            return match fs::OpenOptions::new().write(true).open(path) {
                Ok(mut f) => f.write_all(bytes),
                // A socket cannot be opened by path; `/dev/stdout` and its
                // like name one of our descriptors, which can be written.
                Err(e) => match descriptor_named(path) {
                    Some(fd) => write_to_descriptor(fd, bytes),
                    None => Err(e),
                },
            };
        }
        _ => {}
    }
    let target = final_path(path)?;
    let tmp = temp_path(&target);
    let result = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        // A file replaced keeps its permissions.
        if let Ok(old) = fs::metadata(&target) {
            let _ = fs::set_permissions(&tmp, old.permissions());
        }
        fs::rename(&tmp, &target)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Whether `path` is a stream, which takes one file: a special file (a
/// pipe, a terminal) or one of our descriptors (`/dev/stdout`, whatever it
/// was redirected to).
pub fn is_stream(path: &Path) -> bool {
    descriptor_named(path).is_some() || matches!(fs::metadata(path), Ok(m) if !m.is_file() && !m.is_dir())
}

/// Whether [`write_atomic`] could write `path` now, found without writing
/// it: a directory is refused, an existing file that is not a regular one
/// (a pipe, `/dev/stdout`) must be writable, and otherwise a file must be
/// creatable beside the one the path leads to (a probe, removed at once).
pub fn check_writable(path: &Path) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")),
        Ok(m) if !m.is_file() => {
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            // SAFETY: `c` is a NUL-terminated path; access only reads it.
            // Opening a pipe to find out could block until a reader comes.
            return if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            };
        }
        _ => {}
    }
    let probe = temp_path(&final_path(path)?);
    fs::OpenOptions::new().write(true).create_new(true).open(&probe)?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// The descriptor a path names through `/proc/self/fd/N` or `/dev/fd/N`
/// (where `/dev/stdout` leads), if it does.
fn descriptor_named(path: &Path) -> Option<i32> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        let text = p.to_str()?;
        for prefix in ["/proc/self/fd/", "/dev/fd/"] {
            if let Some(n) = text.strip_prefix(prefix).and_then(|n| n.parse().ok()) {
                return Some(n);
            }
        }
        let link = fs::read_link(&p).ok()?;
        p = match p.parent() {
            Some(dir) if link.is_relative() => dir.join(link),
            _ => link,
        };
    }
    None
}

/// Writes all of `bytes` to descriptor `fd`.
fn write_to_descriptor(fd: i32, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: writes from a valid buffer of `bytes.len()` bytes to a
        // descriptor number; a bad one is an error, not undefined behaviour.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// The path a chain of symbolic links ends at (which may not exist yet).
fn final_path(path: &Path) -> io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    // As the kernel, give up after 40 links.
    for _ in 0..40 {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

fn temp_path(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Unique within the process (counter) and across processes (pid), and
    // hidden, so a stray one after a crash is not mistaken for a profile.
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = format!(".{name}.{}-{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
    path.with_file_name(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn writes_go_through_links_and_never_replace_special_files() {
        let dir = std::env::temp_dir().join(format!("machsampler-write-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("real")).unwrap();
        // A link to a file: the file gets the bytes, the link stays a link.
        let file = dir.join("real").join("p.txt");
        fs::write(&file, "old").unwrap();
        let link = dir.join("link.txt");
        std::os::unix::fs::symlink("real/p.txt", &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&file).unwrap(), "new");
        // A dangling link: the file it names is created.
        let dangling = dir.join("dangling.txt");
        std::os::unix::fs::symlink("real/made.txt", &dangling).unwrap();
        write_atomic(&dangling, b"made").unwrap();
        assert_eq!(fs::read_to_string(dir.join("real").join("made.txt")).unwrap(), "made");
        assert!(fs::symlink_metadata(&dangling).unwrap().file_type().is_symlink());
        // A FIFO is streamed to, not replaced.
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: creates a FIFO at a path in our temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = std::thread::spawn({
            let fifo = fifo.clone();
            move || fs::read(fifo).unwrap()
        });
        write_atomic(&fifo, b"streamed").unwrap();
        assert_eq!(reader.join().unwrap(), b"streamed");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        // A directory is an error, and nothing is left behind anywhere.
        assert_eq!(write_atomic(&dir.join("real"), b"x").unwrap_err().kind(), io::ErrorKind::IsADirectory);
        let mut names: Vec<String> =
            fs::read_dir(dir.join("real")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        names.sort();
        assert_eq!(names, vec!["made.txt", "p.txt"]);
        // A link loop is an error, not a hang.
        let a = dir.join("a");
        std::os::unix::fs::symlink("b", &a).unwrap();
        std::os::unix::fs::symlink("a", dir.join("b")).unwrap();
        assert!(write_atomic(&a, b"x").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn formats_by_name_and_extension() {
        for f in Format::ALL {
            assert_eq!(Format::parse(f.name()), Some(f));
            assert_eq!(Format::from_path(&format!("dir.x/out{}", f.extension())), Some(f));
        }
        assert_eq!(Format::from_path("A.SPEEDSCOPE.JSON"), Some(Format::Speedscope));
        assert_eq!(Format::from_path("cpu.pb.gz"), Some(Format::Pprof));
        assert_eq!(Format::from_path("profile.json"), None);
        assert_eq!(Format::from_path("machprof"), None);
        assert_eq!(Format::parse("flamegraph"), Some(Format::FlamegraphHtml));
        assert_eq!(Format::parse("nope"), None);
    }

    #[test]
    fn every_format_exports_the_sample_profile() {
        let p = sample_profile();
        for f in Format::ALL {
            let out = export(&p, f).unwrap_or_else(|e| panic!("{}: {e}", f.name()));
            assert!(!out.is_empty(), "{}", f.name());
        }
        // Without symbols too: names fall back to addresses.
        let mut p = sample_profile();
        p.symbols = None;
        for f in Format::ALL {
            export(&p, f).unwrap();
        }
    }

    #[test]
    fn every_format_exports_an_empty_profile() {
        let p = ProfileData::default();
        for f in Format::ALL {
            export(&p, f).unwrap_or_else(|e| panic!("{}: {e}", f.name()));
        }
    }

    #[test]
    fn invalid_profiles_are_errors() {
        let mut p = sample_profile();
        p.sample_stack[0] = 42;
        for f in Format::ALL {
            assert!(export(&p, f).is_err());
        }
    }

    #[test]
    fn atomic_write_replaces_whole_file_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("machsampler-atomic-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.txt");
        write_atomic(&path, b"first").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert!(write_atomic(&dir, b"x").is_err(), "a directory is not overwritten");
        assert!(write_atomic(&dir.join("missing/out.txt"), b"x").is_err());
        assert!(check_writable(&path).is_ok() && check_writable(&dir.join("new.txt")).is_ok());
        assert_eq!(check_writable(&dir).unwrap_err().kind(), io::ErrorKind::IsADirectory);
        assert_eq!(check_writable(&dir.join("missing/out.txt")).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(check_writable(Path::new("/dev/null")).is_ok());
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out.txt")]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
