# Sourced by scripts/test-all.sh and scripts/build-darwin.sh: how this
# machine compiles the crate for targets whose standard library it lacks
# (macOS from Linux, the other Linux architecture). The standard library is
# always built from source (-Zbuild-std), so no prebuilt one is needed:
#
#   - Debian: Debian's `rustc-web` compiler with the library source from
#     `rust-web-src` (and `rust-web-clippy` for clippy), from apt;
#   - anywhere else (Ubuntu, macOS): the rustup toolchain on PATH and its
#     `rust-src` component.
#
# RUSTC_BOOTSTRAP=1 lets a stable compiler take -Z flags. After
# `cross_rust_setup`, run cargo as `env "${CROSS_RUST_ENV[@]}" cargo ...`.
# shellcheck shell=bash

if [ -z "${SUDO+set}" ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
fi

# cross_rust_setup std|clippy: installs what is missing to compile (std), or
# to compile and lint (clippy).
cross_rust_setup() {
  if [ "$(uname -s)" = Linux ] && grep -qx 'ID=debian' /etc/os-release 2>/dev/null; then
    CROSS_RUST_KIND=debian
    local need=()
    [ -x /usr/bin/rustc ] || need+=(rustc-web)
    [ -d /usr/lib/rustlib/src/rust/library ] || need+=(rust-web-src)
    if [ "$1" = clippy ] && [ ! -x /usr/bin/clippy-driver ]; then need+=(rust-web-clippy); fi
    if [ ${#need[@]} -gt 0 ]; then
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
    fi
    CROSS_RUST_ENV=(RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1)
  else
    CROSS_RUST_KIND=rustup
    if ! command -v rustup >/dev/null; then
      echo "cross-compiling needs rustup (https://rustup.rs) or Debian's rustc-web" >&2
      return 1
    fi
    local sysroot
    sysroot=$(rustc --print sysroot)
    if [ ! -d "$sysroot/lib/rustlib/src/rust/library" ]; then rustup component add rust-src; fi
    if [ "$1" = clippy ] && ! cargo clippy --version >/dev/null 2>&1; then rustup component add clippy; fi
    CROSS_RUST_ENV=(RUSTC_BOOTSTRAP=1)
  fi
}

# cross_clippy TRIPLE [cargo args...]: clippy with -D warnings for TRIPLE.
cross_clippy() {
  local triple=$1
  shift
  if [ "$CROSS_RUST_KIND" = debian ]; then
    # rustup's cargo-clippy drives rustup's own compiler; Debian's
    # clippy-driver goes in as a workspace wrapper instead, and takes its
    # lint flags from CLIPPY_ARGS (cargo check has no `-- -D warnings`).
    env "${CROSS_RUST_ENV[@]}" RUSTC_WORKSPACE_WRAPPER=/usr/bin/clippy-driver \
      CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ \
      cargo check -Zbuild-std=std,panic_abort --target "$triple" "$@"
  else
    env "${CROSS_RUST_ENV[@]}" cargo clippy -Zbuild-std=std,panic_abort --target "$triple" "$@" -- -D warnings
  fi
}
