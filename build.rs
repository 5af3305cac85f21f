fn main() {
    napi_build::setup();
    // Bind every symbol at load time: the signal handler must never enter
    // the lazy binder, which takes locks.
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
    } else if os == "macos" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-bind_at_load");
    }
}
