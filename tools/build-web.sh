#!/usr/bin/env bash
# Builds the WebAssembly module and the web files into build-web/ (docs/web.md):
#   build-web/gemma-engine.js, gemma-engine.wasm   the ES module (createGemmaModule) and its wasm
#   build-web/lib/                                 the JavaScript library (gemma-engine.mjs, .d.ts)
# Needs Debian's emscripten (tools/setup.sh). Options: BUILD_DIR (build-web), JOBS (2),
# BUILD_TYPE (Release), THREADS=1 (also the pthreads build, in build-web-threads/, copied beside as
# gemma-engine-mt.js / .wasm / .worker.js: docs/web.md), and any extra CMake arguments, e.g.
# -DCMAKE_UNITY_BUILD=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-web}
# Node.js from outside Debian does not look in Debian's node module directory, where Emscripten's
# JavaScript optimizer finds acorn.
export NODE_PATH=${NODE_PATH:-/usr/share/nodejs}
command -v emcmake >/dev/null || { echo "emcmake not found: apt-get install emscripten" >&2; exit 2; }
emcmake cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@" >/dev/null
# The module, and the kernel tests compiled to WebAssembly where GoogleTest's sources are there.
targets=(gemma-engine)
ninja -C "$build_dir" -t targets all | grep -q "^gemma-fast-ops-test:" && targets+=(gemma-fast-ops-test)
ninja -C "$build_dir" -j"${JOBS:-2}" "${targets[@]}"
if [ "${THREADS:-0}" = 1 ]; then
  mt_dir=${build_dir}-threads
  emcmake cmake -S . -B "$mt_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DGEMMA_WEB_THREADS=ON "$@" >/dev/null
  ninja -C "$mt_dir" -j"${JOBS:-2}" gemma-engine
  cp "$mt_dir"/gemma-engine-mt.js "$mt_dir"/gemma-engine-mt.wasm "$mt_dir"/gemma-engine-mt.worker.js "$build_dir"/
fi
