// Every WGSL kernel of the WebGPU backend (src/backend/webgpu/wgsl/: the prelude + each kernel, as
// webgpu_backend.cc composes them) compiles and makes a compute pipeline under Dawn's validation
// on its null device (no GPU or driver needed): Dawn for Node, npm `webgpu` (a test asset).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { check, finish, sourceDir } from './harness.mjs';

const dawnDir = path.join(sourceDir, '.cache/npm-assets/node_modules/webgpu');
if (!fs.existsSync(dawnDir)) {
  console.log(`SKIP: no Dawn for Node at ${dawnDir} (tools/setup.sh installs the test assets)`);
  process.exit(77);
}
const dawn = createRequire(import.meta.url)(dawnDir);
Object.assign(globalThis, dawn.globals);
const gpu = dawn.create(['backend=null']);  // keep it referenced while in use
const adapter = await gpu.requestAdapter();
const device = await adapter.requestDevice();
const dir = path.join(sourceDir, 'src/backend/webgpu/wgsl');
const prelude = fs.readFileSync(path.join(dir, 'prelude.wgsl'), 'utf8');
const preludeLines = prelude.split('\n').length - 1;
let n = 0;
for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.wgsl') && f !== 'prelude.wgsl').sort()) {
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ label: f, code: prelude + fs.readFileSync(path.join(dir, f), 'utf8') });
  for (const m of (await module.getCompilationInfo()).messages) {
    const line = m.lineNum > preludeLines ? `${f}:${m.lineNum - preludeLines}` : `prelude.wgsl:${m.lineNum}`;
    console.log(`${m.type}: ${line}: ${m.message}`);
    check(m.type !== 'error', `${line} does not compile`);
  }
  device.createComputePipeline({ label: f, layout: 'auto', compute: { module, entryPoint: 'main' } });
  const e = await device.popErrorScope();
  check(!e, `${f}: ${e?.message}`);
  ++n;
}
check(n >= 9, `only ${n} kernels found`);
console.log(`${n} kernels validated on Dawn's null device`);
device.destroy();
finish('web_wgsl_test');
process.exit(0);  // Dawn for Node can crash in its teardown at a natural exit
