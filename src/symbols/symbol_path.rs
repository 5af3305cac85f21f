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
