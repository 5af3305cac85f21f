//! Demangling of C++ and Rust symbol names.

/// Demangles `name` if it is a C++ (`_Z…`) or Rust (`_R…`, or legacy
/// `_ZN…17h<hash>E`) symbol; otherwise returns it unchanged. Rust is tried
/// first because legacy Rust names are also valid C++ manglings, which would
/// keep the hash suffix.
pub fn demangle(name: &str) -> String {
    // macOS prefixes C symbols with an underscore; `__Z` is C++.
    let stripped = name.strip_prefix('_').filter(|n| n.starts_with("_Z") || n.starts_with("_R")).unwrap_or(name);
    if let Ok(d) = rustc_demangle::try_demangle(stripped) {
        return format!("{d:#}");
    }
    if stripped.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(stripped) {
            let opts = cpp_demangle::DemangleOptions::new().no_return_type();
            if let Ok(d) = sym.demangle_with_options(&opts) {
                return d;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn cpp_rust_and_plain() {
        assert_eq!(demangle("_ZN4node5StartEiPPc"), "node::Start(int, char**)");
        assert_eq!(demangle("__ZN4node5StartEiPPc"), "node::Start(int, char**)");
        assert_eq!(demangle("_ZN3foo3bar17h0123456789abcdefE"), "foo::bar");
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(demangle("deflate_slow"), "deflate_slow");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
        assert_eq!(demangle(""), "");
    }
}
