// Shared by the Node tests of the WebAssembly build (web/test/*_test.mjs, registered with ctest by
// web/CMakeLists.txt, label "web"): the build's paths, loading the module in this process, the
// native oracle, and a small check/report helper. Exit status 77 = skipped (no build-web/).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

export const sourceDir = process.env.GEMMA_SOURCE_DIR ?? path.resolve(new URL('../..', import.meta.url).pathname);
export const webDir = process.env.GEMMA_WEB_BUILD_DIR ?? path.join(sourceDir, 'build-web');
export const oracleBin = process.env.GEMMA_BIN_GEMMA_WEB_ORACLE;

export function requireWebBuild() {
  if (!fs.existsSync(path.join(webDir, 'gemma-engine.wasm'))) {
    console.log(`SKIP: no WebAssembly build at ${webDir} (bash tools/build-web.sh)`);
    process.exit(77);
  }
}

// The module, in this process, with the host's file system mounted at /host (NODEFS); `options`
// go to the module's factory (e.g. {gpu}).
export async function loadModule(options = {}) {
  const moduleUrl = pathToFileURL(path.join(webDir, 'gemma-engine.js')).href;
  globalThis.require ??= createRequire(moduleUrl);  // Emscripten 3.1.6's ES module under Node
  globalThis.__dirname ??= webDir;
  const { default: create } = await import(moduleUrl);
  const M = await create({ wasmBinary: fs.readFileSync(path.join(webDir, 'gemma-engine.wasm')), ...options });
  M.FS.mkdir('/host');
  M.FS.mount(M.NODEFS, { root: '/' }, '/host');
  return M;
}

// One conformance request answered by the module (paths under /host) and by the native oracle.
export function wasmOp(M, request) {
  const r = JSON.parse(M.conformance(JSON.stringify(request)));
  if (r.error) throw new Error(`wasm: ${r.error.code}: ${r.error.message}`);
  return r.ok;
}
export function nativeOp(request) {
  if (!oracleBin) throw new Error('GEMMA_BIN_GEMMA_WEB_ORACLE is not set (run through ctest)');
  const file = path.join(os.tmpdir(), `gemma-web-op-${process.pid}.json`);
  fs.writeFileSync(file, JSON.stringify(request));
  try {
    const r = JSON.parse(execFileSync(oracleBin, [file], { maxBuffer: 1 << 30 }).toString());
    return r.ok;
  } finally {
    fs.rmSync(file, { force: true });
  }
}
// NODEFS does not follow host symlinks out of the mount: name the real path.
export const host = (p) => '/host' + fs.realpathSync(p);

let failures = 0;
export function check(ok, what) {
  if (!ok) {
    ++failures;
    console.log(`FAIL: ${what}`);
  }
  return ok;
}
export function finish(name) {
  if (failures) {
    console.log(`${name}: ${failures} failure(s)`);
    process.exit(1);
  }
  console.log(`${name}: passed`);
}
export const readJsonl = (p) => fs.readFileSync(p, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
