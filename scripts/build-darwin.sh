#!/usr/bin/env bash
# `npm run build:darwin [-- arm64|x64]`: the macOS addons, built on any host
# (Linux or macOS). Writes machsampler.darwin-arm64.node and
# machsampler.darwin-x64.node at the top level (the names binding.js loads)
# and copies each into its platform package, npm/darwin-*/, for `npm pack`.
#
# How: cargo-zigbuild drives cargo with zig as the linker; zig links against
# the libSystem stubs (.tbd) it ships, so no macOS SDK is needed. Both come
# from PyPI, pinned, into a venv under .cache/. The standard library is
# built from source (see scripts/rust-cross-env.sh).
#
# Binding: the sampler must never enter dyld's lazy binder while a thread is
# suspended or inside the thread hook. Apple's ld gets that from
# -bind_at_load (build.rs); zig's linker rejects that flag and otherwise
# calls every libSystem function through a lazily bound stub. So the code is
# compiled with -Zplt=no (and, on arm64, LLVM's
# -aarch64-macho-enable-nonlazybind): each call into libSystem loads its
# target from a GOT entry, which dyld binds when it loads the addon.
# tests/macho.rs (`npm run test:macho`) checks that and more in the files.
#
# Deployment targets: macOS 10.15 (Catalina) on x86_64, 11.0 on arm64 (the
# first macOS for Apple silicon).
set -euo pipefail
cd "$(dirname "$0")/.."

ZIGLANG_VERSION=0.17.1
CARGO_ZIGBUILD_VERSION=0.24.0
VENV=.cache/darwin-venv
TARGET_DIR=target/darwin

log() { printf '\n=== %s\n' "$*"; }

# shellcheck source=scripts/rust-cross-env.sh
. scripts/rust-cross-env.sh

arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(arm64 x64)
for a in "${arches[@]}"; do
  case "$a" in
    arm64 | x64) ;;
    *) echo "usage: $0 [arm64] [x64]" >&2; exit 2 ;;
  esac
done

log "darwin toolchain: zig $ZIGLANG_VERSION, cargo-zigbuild $CARGO_ZIGBUILD_VERSION"
have_pinned() {
  [ -x "$VENV/bin/cargo-zigbuild" ] &&
    [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("ziglang"), m.version("cargo-zigbuild"))' 2>/dev/null)" = "$ZIGLANG_VERSION $CARGO_ZIGBUILD_VERSION" ]
}
if ! have_pinned; then
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    # Debian's python3 ships venv separately.
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
  fi
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "ziglang==$ZIGLANG_VERSION" "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION"
fi
cross_rust_setup std
echo "standard library from: $CROSS_RUST_KIND"

build() {
  local arch=$1 triple minos
  # shellcheck disable=SC2054 # the commas belong to -Wl
  local flags=(-Zplt=no -Clink-arg=-Wl,-dead_strip_dylibs "-Clink-arg=-Wl,-install_name,@rpath/machsampler.darwin-$arch.node")
  case "$arch" in
    arm64) triple=aarch64-apple-darwin minos=11.0 flags+=(-Cllvm-args=-aarch64-macho-enable-nonlazybind) ;;
    x64) triple=x86_64-apple-darwin minos=10.15 ;;
  esac
  log "build $triple (macOS $minos and later)"
  local start=$SECONDS
  # RUSTFLAGS reach the standard library too (it is built here), so its
  # calls into libSystem are bound at load like ours. With --target they do
  # not reach build scripts. dead_strip_dylibs drops libiconv and
  # libcharset, which std names but the addon never calls; the install name
  # keeps this machine's paths out of the file.
  env "${CROSS_RUST_ENV[@]}" PATH="$PWD/$VENV/bin:$PATH" \
    MACHSAMPLER_MACOS_LINKER=zig MACOSX_DEPLOYMENT_TARGET=$minos \
    CARGO_TARGET_DIR=$TARGET_DIR RUSTFLAGS="${flags[*]}" \
    cargo-zigbuild build --release --lib -Zbuild-std=std,panic_abort --target "$triple"
  local out="machsampler.darwin-$arch.node"
  cp "$TARGET_DIR/$triple/release/libmachsampler.dylib" "$out"
  cp "$out" "npm/darwin-$arch/$out"
  echo "$out: $(wc -c <"$out" | tr -d ' ') bytes, built in $((SECONDS - start)) s (also in npm/darwin-$arch/)"
}

for a in "${arches[@]}"; do build "$a"; done
