#!/usr/bin/env bash
# install_test.sh BUILD_DIR EXAMPLE_DIR GEMMA_ENGINE_CLI [SANITIZERS]
# SANITIZERS: the build's GEMMA_SANITIZE; a program linking an instrumented library is built with
# the same -fsanitize.
set -euo pipefail
build=$1 example=$2 cli=$3 san=${4:-}
flags=()
cxx_san=""
if [ -n "$san" ]; then
  cxx_san="-fsanitize=$san"
  flags=(-DCMAKE_CXX_FLAGS="$cxx_san" -DCMAKE_EXE_LINKER_FLAGS="$cxx_san")
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/gemma/engine.h"
ls "$work/prefix"/lib*/libgemma-engine.a "$work/prefix"/lib*/libgemma-engine.so >/dev/null
"$cli" synth --preset tiny --out "$work/model" >/dev/null
for static in OFF ON; do
  cmake -S "$example" -B "$work/b$static" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
        -DGEMMA_ENGINE_STATIC=$static "${flags[@]}" >/dev/null
  cmake --build "$work/b$static" >/dev/null
  LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64" "$work/b$static/hello" "$work/model" \
    > "$work/out$static.txt"
  grep -q "^tokens: 8, stop: length" "$work/out$static.txt"
done
cmp "$work/outOFF.txt" "$work/outON.txt"
# pkg-config: the same program compiles and links from the .pc file.
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib64/pkgconfig"
c++ $cxx_san -o "$work/hello_pc" "$example/main.cc" $(pkg-config --cflags --libs gemma-engine)
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64" "$work/hello_pc" "$work/model" | cmp - "$work/outOFF.txt"
echo "install check: shared, static and pkg-config builds agree"
