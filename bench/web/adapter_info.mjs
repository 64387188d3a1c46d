// What Dawn for Node's adapter offers (bench/web/webgpu_h200.sh step `adapter`): its info, features
// (with and without Dawn's allow_unsafe_apis toggle, under which experimental features such as
// chromium-experimental-subgroup-matrix appear), the limits the backend asks for, and WGSL's
// language features. Usage: node bench/web/adapter_info.mjs [dawn create() flags...]
import path from 'node:path';
import { createRequire } from 'node:module';

const sourceDir = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const dawn = createRequire(import.meta.url)(path.join(sourceDir, '.cache/npm-assets/node_modules/webgpu'));
Object.assign(globalThis, dawn.globals);
const flags = process.argv.slice(2);
for (const extra of [[], ['enable-dawn-features=allow_unsafe_apis']]) {
  const gpu = dawn.create([...flags, ...extra]);
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) {
    console.log(`flags ${[...flags, ...extra].join(' ')}: no adapter`);
    continue;
  }
  const info = adapter.info || {};
  console.log(`flags ${[...flags, ...extra].join(' ') || '(none)'}: ${[info.vendor, info.architecture, info.device, info.description].filter((s) => s).join(' ')}`);
  console.log(`  features: ${[...adapter.features].sort().join(' ')}`);
  const L = adapter.limits;
  console.log(`  limits: maxBufferSize ${L.maxBufferSize}, maxStorageBufferBindingSize ${L.maxStorageBufferBindingSize}, ` +
              `maxComputeWorkgroupStorageSize ${L.maxComputeWorkgroupStorageSize}, maxComputeInvocationsPerWorkgroup ${L.maxComputeInvocationsPerWorkgroup}, ` +
              `maxStorageBuffersPerShaderStage ${L.maxStorageBuffersPerShaderStage}, minSubgroupSize ${L.minSubgroupSize ?? info.subgroupMinSize}, maxSubgroupSize ${L.maxSubgroupSize ?? info.subgroupMaxSize}`);
  console.log(`  wgsl: ${[...(gpu.wgslLanguageFeatures ?? [])].sort().join(' ')}`);
  if (adapter.features.has('chromium-experimental-subgroup-matrix')) {
    try {
      const device = await adapter.requestDevice({ requiredFeatures: ['chromium-experimental-subgroup-matrix'] });
      const configs = adapter.info.subgroupMatrixConfigs ?? device.adapterInfo?.subgroupMatrixConfigs;
      // (Dawn's objects keep their fields as getters: JSON.stringify sees none)
      const fields = (c) => ['componentType', 'resultComponentType', 'M', 'N', 'K'].map((k) => `${k} ${c[k]}`).join(', ');
      console.log(`  subgroup matrix configs: ${configs ? [...configs].map((c) => `{${fields(c)}}`).join(' ') : 'not reported'}`);
      device.destroy();
    } catch (e) {
      console.log(`  subgroup matrix device: ${e.message}`);
    }
  }
}
process.exit(0);
