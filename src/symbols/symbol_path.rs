//! The symbol path: where symbol files are looked for besides the module
//! files themselves.
//!
//! An entry is a directory (dSYM bundles, Breakpad `.sym` files, separate
//! ELF debug files) or an `http(s)://` symbol server in the Breakpad layout
//! `<debug file>/<DEBUG ID>/<debug file>.sym`. Symbolization never touches
//! the network: a server's files are read from its download cache, a
//! directory per server under the cache root, which only the explicit
//! download step (`fetchSymbols`, the CLI) fills. A string holds entries
//! separated by `;` (a URL has colons, so `:` cannot separate).

use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymbolSource {
    Dir(PathBuf),
    /// A symbol server: its URL without a trailing `/`, and the directory
    /// its downloads are cached in (same layout as the server).
    Server {
        url: String,
        cache: PathBuf,
    },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolPath {
    pub sources: Vec<SymbolSource>,
}

/// The default download cache: `$XDG_CACHE_HOME/machsampler/symbols`, else
/// `~/Library/Caches/machsampler/symbols` on macOS and
/// `~/.cache/machsampler/symbols` elsewhere.
pub fn default_cache_root() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("machsampler/symbols");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    if cfg!(target_vendor = "apple") {
        home.join("Library/Caches/machsampler/symbols")
    } else {
        home.join(".cache/machsampler/symbols")
    }
}

/// The cache directory name of a server URL: its host, port and path with
/// every character outside `[A-Za-z0-9.-]` made `_`, so
/// `https://symbols.electronjs.org` is `symbols.electronjs.org` and
/// `http://127.0.0.1:8080/sym` is `127.0.0.1_8080_sym`.
pub fn cache_dir_name(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r).trim_end_matches('/');
    rest.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

impl SymbolPath {
    /// Parses entries (each may itself hold several, separated by `;`).
    /// Empty entries are ignored. The error names the bad entry.
    pub fn parse<S: AsRef<str>>(entries: &[S], cache_root: &Path) -> Result<SymbolPath, String> {
        let mut sources = Vec::new();
        for entry in entries.iter().flat_map(|e| e.as_ref().split(';')) {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let lower = entry.to_ascii_lowercase();
            if lower.starts_with("https://") || lower.starts_with("http://") {
                let url = entry.trim_end_matches('/').to_string();
                let name = cache_dir_name(&url);
                let host = entry.split_once("://").map_or("", |(_, h)| h.trim_matches('/'));
                if host.is_empty() || name.starts_with('.') {
                    return Err(format!("symbol path entry '{entry}' is not a usable URL"));
                }
                sources.push(SymbolSource::Server { cache: cache_root.join(name), url });
            } else if lower.contains("://") {
                return Err(format!(
                    "symbol path entry '{entry}': only directories and http:// or https:// symbol servers are supported"
                ));
            } else {
                sources.push(SymbolSource::Dir(PathBuf::from(entry)));
            }
        }
        Ok(SymbolPath { sources })
    }

    /// Every local directory to search: the directories, then the servers'
    /// caches.
    pub fn local_dirs(&self) -> Vec<PathBuf> {
        let dirs = self.sources.iter().filter_map(|s| match s {
            SymbolSource::Dir(d) => Some(d.clone()),
            _ => None,
        });
        let caches = self.sources.iter().filter_map(|s| match s {
            SymbolSource::Server { cache, .. } => Some(cache.clone()),
            _ => None,
        });
        dirs.chain(caches).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// A stable text form, part of the module cache key.
    pub fn key(&self) -> String {
        format!("{:?}", self.sources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_directories_or_servers() {
        let root = Path::new("/cache");
        let p = SymbolPath::parse(&["/a;https://symbols.electronjs.org/", " ", "http://127.0.0.1:8080/sym;;/b"], root)
            .unwrap();
        assert_eq!(
            p.sources,
            vec![
                SymbolSource::Dir("/a".into()),
                SymbolSource::Server {
                    url: "https://symbols.electronjs.org".into(),
                    cache: "/cache/symbols.electronjs.org".into()
                },
                SymbolSource::Server {
                    url: "http://127.0.0.1:8080/sym".into(),
                    cache: "/cache/127.0.0.1_8080_sym".into()
                },
                SymbolSource::Dir("/b".into()),
            ]
        );
        assert_eq!(
            p.local_dirs(),
            ["/a", "/b", "/cache/symbols.electronjs.org", "/cache/127.0.0.1_8080_sym"].map(PathBuf::from).to_vec()
        );
        assert!(SymbolPath::parse(&["ftp://x"], root).unwrap_err().contains("ftp://x"));
        assert!(SymbolPath::parse(&["https://"], root).is_err());
        assert!(SymbolPath::parse(&["https://.."], root).is_err());
        assert!(SymbolPath::parse::<&str>(&[], root).unwrap().is_empty());
    }
}

/// One symbol file a server may have for a module of a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Download {
    pub url: String,
    /// Where the download cache keeps it (the server's layout).
    pub file: PathBuf,
    /// The module's path, for messages.
    pub module: String,
}

/// A URL path segment: everything but unreserved characters escaped.
fn url_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The symbol files to ask the servers for: one per server and module
/// that some frame of `profile` is in and that has a build id, unless the
/// cache already holds it.
pub fn downloads(profile: &crate::profile::ProfileData, path: &SymbolPath) -> Vec<Download> {
    let ranges = super::ModuleRanges::new(profile);
    let mut used = vec![false; profile.modules.len()];
    for &a in &profile.frame_address {
        if let Some(i) = ranges.find(a) {
            used[i] = true;
        }
    }
    let macho = profile.meta.platform == "darwin";
    let mut out = Vec::new();
    for (m, _) in profile.modules.iter().zip(used).filter(|(_, u)| *u) {
        let Some(name) = Path::new(&m.path).file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        let Some(id) = super::breakpad::debug_id(&m.build_id, macho) else { continue };
        for s in &path.sources {
            if let SymbolSource::Server { url, cache } = s {
                let file = cache.join(&name).join(&id).join(format!("{name}.sym"));
                if file.is_file() {
                    continue;
                }
                let seg = url_segment(&name);
                out.push(Download { url: format!("{url}/{seg}/{id}/{seg}.sym"), file, module: m.path.clone() });
            }
        }
    }
    out
}

#[cfg(test)]
mod download_tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn downloads_cover_the_modules_frames_are_in() {
        let mut p = sample_profile();
        p.meta.platform = "darwin".into();
        p.modules[0].path = "/Applications/X.app/Electron Framework".into();
        p.modules[0].build_id = "ba940815414031579d26a53b89de388a".into();
        let mut unused = p.modules[0].clone();
        unused.start = 0x100000;
        unused.end = 0x200000;
        p.modules.push(unused);
        let root = crate::symbols::test_fixtures::tempdir("downloads");
        let path = SymbolPath::parse(&["https://sym.example/x/", "/local"], &root).unwrap();
        let d = downloads(&p, &path);
        let id = "BA940815414031579D26A53B89DE388A0";
        assert_eq!(
            d,
            vec![Download {
                url: format!("https://sym.example/x/Electron%20Framework/{id}/Electron%20Framework.sym"),
                file: root.join("sym.example_x/Electron Framework").join(id).join("Electron Framework.sym"),
                module: p.modules[0].path.clone(),
            }]
        );
        // Once cached, it is not asked for again.
        std::fs::create_dir_all(d[0].file.parent().unwrap()).unwrap();
        std::fs::write(&d[0].file, "MODULE").unwrap();
        assert_eq!(downloads(&p, &path), vec![]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
