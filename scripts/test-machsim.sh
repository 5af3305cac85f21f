#!/usr/bin/env bash
# `npm run test:machsim`: the Mach backend (src/platform/macos), run on
# Linux against the simulated Mach (src/platform/machsim, cargo feature
# `machsim`): its Rust tests, then __test__/darwin.test.js against an addon
# built with the simulation, preloaded so that the simulated libpthread sees
# every thread Node creates. Both are built with line coverage, reported
# for src/platform/macos; the lines never run are written to
# target/machsim/uncovered.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -s)" != Linux ]; then
  echo "machsim: the simulated Mach is built and run on Linux only" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

# llvm-profdata/llvm-cov must match rustc's LLVM.
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=llvm-profdata-$llvm_major
llvmcov=llvm-cov-$llvm_major
if ! command -v "$profdata" >/dev/null || ! command -v "$llvmcov" >/dev/null; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "llvm-$llvm_major" >/dev/null
fi

echo "--- machsim: clippy with the simulation"
cargo clippy --all-targets --features machsim -- -D warnings

out=target/machsim
rm -rf "$out/prof"
mkdir -p "$out/prof"
export CARGO_TARGET_DIR=$out
# Frame pointers: the tests check that walks pass through their own frames.
export RUSTFLAGS="-C force-frame-pointers=yes -C instrument-coverage"
export LLVM_PROFILE_FILE="$PWD/$out/prof/%p-%m.profraw"

# The addon build passes --target; so do the tests, to share one build of
# the dependencies.
host=$(rustc -vV | sed -n 's/^host: //p')

echo "--- machsim: Rust tests of the Mach backend"
# One test at a time: the simulated kernel is process-wide, and each
# suspension waits for the scheduler, so parallel tests would starve them.
cargo test --target "$host" --features machsim --lib platform::mac -- --test-threads=1
testbin=$(cargo test --target "$host" --features machsim --lib --no-run --message-format=json 2>/dev/null |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.split("\n")){try{const m=JSON.parse(l);if(m.executable&&m.profile&&m.profile.test)console.log(m.executable)}catch{}}})' | tail -1)
[ -x "$testbin" ] || { echo "machsim: the test binary was not found" >&2; exit 1; }

echo "--- machsim: addon with the simulated Mach"
npx napi build --platform --features "testing machsim" --target-dir "$out" --output-dir "$out" --no-js --dts binding.d.ts
case "$(uname -m)" in
  x86_64) addon=$PWD/$out/machsampler.linux-x64-gnu.node ;;
  aarch64) addon=$PWD/$out/machsampler.linux-arm64-gnu.node ;;
  *) echo "machsim: no addon name for $(uname -m)" >&2; exit 1 ;;
esac

echo "--- machsim: __test__/darwin.test.js"
LD_PRELOAD=$addon NAPI_RS_NATIVE_LIBRARY_PATH=$addon MACHSAMPLER_MACHSIM=1 MACHSAMPLER_ALLOC_CHECK=1 \
  npx jest --runInBand __test__/darwin.test.js

echo "--- machsim: coverage"
"$profdata" merge -sparse "$out"/prof/*.profraw -o "$out/machsim.profdata"
# Line coverage of each binary (the test binary and the addon compile the
# same lines), united: a line counts as run if either ran it.
for bin in "$testbin" "$addon"; do
  "$llvmcov" export -format=lcov -instr-profile="$out/machsim.profdata" \
    -ignore-filename-regex='sim_tests\.rs|/\.cargo/|/rustc/' "$bin" "$PWD/src/platform/macos"
done > "$out/machsim.lcov"
awk -F'[:,]' -v root="$PWD/" '
  /^SF:/ { file = substr($0, 4); sub(root, "", file) }
  /^DA:/ && file ~ /^src\/platform\/macos\// { key = file ":" $2; if (!(key in hits) || $3 > hits[key]) hits[key] = $3 }
  END { for (k in hits) print k, hits[k] }' "$out/machsim.lcov" | sort -t: -k1,1 -k2,2n > "$out/lines.txt"
total=$(wc -l < "$out/lines.txt")
covered=$(awk '$2 > 0' "$out/lines.txt" | wc -l)
awk '$2 == 0 { split($1, k, ":"); print k[1] ":" k[2] }' "$out/lines.txt" |
  while IFS=: read -r file line; do printf '%s:%s:%s\n' "$file" "$line" "$(sed -n "${line}p" "$file")"; done > "$out/uncovered.txt"
echo "lines: $covered of $total run; uncovered lines: $((total - covered)) (list in $out/uncovered.txt)"
echo "machsim coverage: $(awk -v c="$covered" -v t="$total" 'BEGIN { printf "%.1f", 100 * c / t }')% of src/platform/macos"
