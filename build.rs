fn main() {
    napi_build::setup();
    // Bind every symbol at load time: the signal handler (Linux) and the
    // stopped window and thread hook (macOS) must never enter the lazy
    // binder, which takes locks.
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    println!("cargo:rerun-if-env-changed=MACHSAMPLER_MACOS_LINKER");
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
    } else if os == "macos" && std::env::var("MACHSAMPLER_MACOS_LINKER").as_deref() != Ok("zig") {
        // Apple's ld. zig's linker rejects -bind_at_load, and without it
        // makes every call into libSystem a lazy stub; scripts/build-darwin.sh
        // (which sets MACHSAMPLER_MACOS_LINKER=zig) compiles with -Zplt=no
        // instead, so that calls go through GOT entries dyld binds at load.
        // tests/macho.rs checks the result in the built files.
        println!("cargo:rustc-cdylib-link-arg=-Wl,-bind_at_load");
    }
}
