// The fast CPU backend's kernel tests (src/backend/cpu/fast/fast_ops_test.cc: quantized linears
// bit-identical to the reference ops, SRQ quantization, dense linears to f32 rounding, attention
// kernels, norms, lookups) compiled to WebAssembly (build-web/gemma-fast-ops-test.js): the
// WebAssembly SIMD kernels against the reference, on the test's random shapes and tails. The
// thread pool's test is left out (the single-threaded module has no threads).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { webDir } from './harness.mjs';

const test = path.join(webDir, 'gemma-fast-ops-test.js');
if (!fs.existsSync(test)) {
  console.log(`SKIP: no ${test} (bash tools/build-web.sh)`);
  process.exit(77);
}
// Emscripten 3.1.6 would fetch() the .wasm's file path with Node 20's global fetch.
const r = spawnSync(process.execPath, ['--no-experimental-fetch', test, '--gtest_filter=FastOps.*'], { stdio: 'inherit' });
process.exit(r.status ?? 1);
