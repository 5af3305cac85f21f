#!/usr/bin/env bash
# Builds the symbolization fixtures in __test__/fixtures/symbols from lib.c:
# small Mach-O dylibs (arm64, x86_64) and an ELF shared object, each
# unstripped, stripped of local symbols, with its debug information apart
# (a dSYM bundle / a separate .debug file) and as a Breakpad .sym file in
# the symbol-server layout <debug file>/<DEBUG ID>/<debug file>.sym.
#
# The outputs are committed; run this only to change them. Needs:
#   pip install ziglang       (zig cc: C compiler and Mach-O linker)
#   apt-get install lld-22    (ld64.lld: a Mach-O linker that writes LC_FUNCTION_STARTS)
#   dsymutil, llvm-strip      (LLVM)
#   cargo install dump_syms   (Breakpad symbol files)
#   gcc, objcopy, strip       (ELF)
set -euo pipefail
cd "$(dirname "$0")/../__test__/fixtures/symbols"
out=$PWD
src=$out/lib.c
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LD64=${LD64:-ld64.lld-22}
DUMP_SYMS=${DUMP_SYMS:-dump_syms}

breakpad() { # <input> <debug file name> <dest root>
  local sym id
  sym=$("$DUMP_SYMS" "$1")
  id=$(printf '%s\n' "$sym" | head -1 | awk '{print $4}')
  mkdir -p "$3/$2/$id"
  printf '%s\n' "$sym" | sed "1s/ [^ ]*\$/ $2/" >"$3/$2/$id/$2.sym"
}

macho() { # <linker: zig|lld> <arch: arm64|x86_64>
  local linker=$1 arch=$2 zarch dir name
  zarch=$([ "$arch" = arm64 ] && echo aarch64 || echo x86_64)
  name=$([ "$linker" = zig ] && echo libfx.dylib || echo libfl.dylib)
  dir=$out/macho/$linker-$arch
  rm -rf "$dir"
  mkdir -p "$dir/full" "$dir/stripped" "$dir/dsym" "$dir/breakpad"
  # The object file is referenced from the debug map under this path;
  # dsymutil reads it, then it is deleted, so nothing else can.
  cp "$src" "$work/lib.c"
  (cd "$work" && python3 -m ziglang cc -target "$zarch-macos" -g -O1 -c -o "lib-$arch.o" lib.c)
  if [ "$linker" = zig ]; then
    # zig's own linker: an empty LC_FUNCTION_STARTS, function starts only in __unwind_info.
    (cd "$work" && python3 -m ziglang cc -target "$zarch-macos" -g -O1 -shared -o "$name" "lib-$arch.o" \
      -Wl,-install_name,@rpath/$name)
  else
    (cd "$work" && "$LD64" -arch "$arch" -platform_version macos 13.0 13.0 -dylib -o "$name" "lib-$arch.o" \
      -install_name "@rpath/$name" -undefined dynamic_lookup)
  fi
  dsymutil "$work/$name" -o "$dir/dsym/$name.dSYM"
  breakpad "$dir/dsym/$name.dSYM/Contents/Resources/DWARF/$name" "$name" "$dir/breakpad"
  # The full image keeps its symbols; the debug map (stabs) pointing at the
  # deleted object file goes, as in a shipped binary.
  llvm-strip -S "$work/$name" -o "$dir/full/$name"
  llvm-strip -x -S "$work/$name" -o "$dir/stripped/$name"
  rm -f "$work/lib-$arch.o" "$work/$name"
}

elf() {
  local dir=$out/elf name=libfe.so
  rm -rf "$dir"
  mkdir -p "$dir/full" "$dir/stripped" "$dir/debug" "$dir/breakpad"
  gcc -g -O1 -fPIC -shared -Wl,--build-id -o "$dir/full/$name" "$src"
  breakpad "$dir/full/$name" "$name" "$dir/breakpad"
  objcopy --only-keep-debug "$dir/full/$name" "$dir/debug/$name.debug"
  strip --strip-all -o "$dir/stripped/$name" "$dir/full/$name"
}

for arch in arm64 x86_64; do
  macho zig "$arch"
  macho lld "$arch"
done
elf
# dsymutil stamps the time into Info.plist only; nothing else varies.
find "$out" -type f | sort | xargs ls -l

# Source maps: TypeScript compiled with a map file and with an inline map,
# and a minified bundle of two modules (npm packages, run with npx).
sourcemap() {
  local dir=$out/sourcemap
  rm -rf "$dir/dist" "$dir/inline" "$dir/bundle"
  local tsc="npx -y -p typescript@5.9 tsc --target es2020 --module commonjs --strict"
  $tsc --sourceMap --outDir "$dir/dist" "$dir/src/fib.ts"
  $tsc --inlineSourceMap --outDir "$dir/inline" "$dir/src/fib.ts"
  npx -y esbuild@0.25 "$dir/bundle-src/greet.js" --bundle --format=iife --minify-identifiers \
    --minify-whitespace --sourcemap --outfile="$dir/bundle/bundle.min.js"
}
sourcemap
