//! Paths of the committed symbolization fixtures
//! (`__test__/fixtures/symbols`, built by `scripts/build-symbol-fixtures.sh`).

use std::path::PathBuf;

pub fn fixture(rel: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("__test__/fixtures/symbols").join(rel);
    assert!(p.exists(), "fixture {} is missing; see scripts/build-symbol-fixtures.sh", p.display());
    p
}

/// A fresh, empty directory for one test.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("machsampler-sym-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
