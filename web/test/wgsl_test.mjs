// Every WGSL kernel of the WebGPU backend (src/backend/webgpu/wgsl/: a family's reductions, the
// prelude and each kernel, as webgpu_backend.cc composes them) compiles and makes a compute
// pipeline under Dawn's validation on its null device (no GPU or driver needed): Dawn for Node,
// npm `webgpu` (a test asset). Every kernel with each of the two reduction preludes
// (prelude_workgroup.wgsl, prelude_subgroups.wgsl: the null adapter has `subgroups`).
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
check(adapter.features.has('subgroups'), "Dawn's null adapter has no subgroups");
const device = await adapter.requestDevice({ requiredFeatures: ['subgroups'] });
const dir = path.join(sourceDir, 'src/backend/webgpu/wgsl');
const read = (f) => fs.readFileSync(path.join(dir, f), 'utf8');
const lines = (s) => s.split('\n').length - 1;
let n = 0;
for (const family of ['prelude_workgroup.wgsl', 'prelude_subgroups.wgsl']) {
  const first = read(family), prelude = read('prelude.wgsl');
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.wgsl') && !f.startsWith('prelude')).sort()) {
    device.pushErrorScope('validation');
    const module = device.createShaderModule({ label: f, code: first + prelude + read(f) });
    for (const m of (await module.getCompilationInfo()).messages) {
      const line = m.lineNum > lines(first) + lines(prelude) ? `${f}:${m.lineNum - lines(first) - lines(prelude)}`
                 : m.lineNum > lines(first) ? `prelude.wgsl:${m.lineNum - lines(first)}` : `${family}:${m.lineNum}`;
      console.log(`${m.type}: ${line}: ${m.message}`);
      check(m.type !== 'error', `${line} does not compile (${family})`);
    }
    device.createComputePipeline({ label: f, layout: 'auto', compute: { module, entryPoint: 'main' } });
    const e = await device.popErrorScope();
    check(!e, `${f} (${family}): ${e?.message}`);
    ++n;
  }
}
check(n >= 18, `only ${n} kernels found`);
console.log(`${n / 2} kernels validated on Dawn's null device with each family's reductions`);
device.destroy();
finish('web_wgsl_test');
process.exit(0);  // Dawn for Node can crash in its teardown at a natural exit
