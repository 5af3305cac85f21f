#!/usr/bin/env bash
# Every check, in order: `npm test` runs this, and so does CI (.ci/run).
# It installs what it needs on a clean machine (Debian packages for the macOS
# type check, npm packages), so it works from a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n=== %s\n' "$*"; }
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

log "system packages"
need=()
command -v /usr/bin/rustc >/dev/null || need+=(rustc-web rust-web-src)
[ -x /usr/bin/clippy-driver ] || need+=(rust-web-clippy)
[ -d /usr/lib/rustlib/src/rust/library ] || need+=(rust-web-src)
command -v mkfifo >/dev/null || need+=(coreutils)
[ -x /usr/bin/chromium ] || need+=(chromium)      # flame-graph page test
command -v script >/dev/null || need+=(bsdutils)  # CLI live-line test (a TTY)
command -v perf >/dev/null || need+=(linux-perf)  # stress: coexistence with perf
command -v gcc >/dev/null || need+=(gcc g++)      # V8 layout probe
if [ ${#need[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

log "npm packages"
if [ ! -x node_modules/.bin/jest ] || [ ! -x node_modules/.bin/napi ]; then
  # Not `npm ci`: the lock cannot list the darwin/arm64 builds of our own
  # platform packages (unpublished) or of @napi-rs/lzma (absent from the
  # registry mirror), and `npm ci` refuses a lock with optional entries
  # missing. `npm install` keeps to the lock where it can and skips them.
  # --ignore-scripts: `prepare` builds the addon, which `npm run build` does
  # below; no dependency has an install script.
  npm install --ignore-scripts --no-audit --no-fund
fi

log "cargo fmt"
cargo fmt --check

log "cargo clippy"
cargo clippy --all-targets -- -D warnings

log "cargo test"
cargo test

for triple in x86_64-apple-darwin aarch64-apple-darwin; do
  log "macOS type check: $triple"
  RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=target/apple \
    cargo check -Zbuild-std=std,panic_abort --target "$triple" --all-targets
  log "macOS clippy: $triple"
  # clippy-driver as a workspace wrapper takes its lint flags from
  # CLIPPY_ARGS (cargo check has no `-- -D warnings`).
  RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=target/apple RUSTC_WORKSPACE_WRAPPER=/usr/bin/clippy-driver \
    CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ \
    cargo check -Zbuild-std=std,panic_abort --target "$triple" --all-targets
done

log "Linux arm64 type check"
RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=target/cross \
  cargo check -Zbuild-std=std,panic_abort --target aarch64-unknown-linux-gnu --all-targets

log "napi build: release"
npm run build
# The generated loader and types are committed: they must be what the
# release build makes (only the public API; no test entry points).
if ! git diff --quiet -- binding.js binding.d.ts; then
  git --no-pager diff --stat -- binding.js binding.d.ts
  echo "binding.js / binding.d.ts differ from the release build's: commit the regenerated files" >&2
  exit 1
fi
# The package test packs this one; the jest suites run the testing build.
mkdir -p target/release-addon
cp machsampler.*.node target/release-addon/

log "napi build: testing (test entry points and fault injection)"
npm run build:testing

log "jest"
npx jest --runInBand "$@"

log "machsim: the Mach backend on the simulated Mach (Rust tests, darwin jest suite, coverage)"
bash scripts/test-machsim.sh

log "all checks passed"
