// The WebGPU backend in headless Chromium (Debian's `chromium` with --enable-unsafe-webgpu:
// SwiftShader's WebGPU, f32): a page on a loopback static server loads the library, fetches each
// transformers golden model (tests/goldens/model/*) and, with backend "webgpu", decodes its golden
// prompts greedily (tokens equal to transformers') and scores prompt + greedy (logits at every
// position within 1e-4 relative L2 of transformers' on the dense goldens; QAT: reported). Also:
// "auto" picks WebGPU there, and the engine reports the adapter. With --workgroup also the
// workgroup kernels (with subgroups where Chromium offers them) on tiny_qat's 8 greedy tokens:
// ~15 s more, SwiftShader compiling the workgroup pipelines on first use (not in CI; Dawn for Node
// runs them in web_webgpu_test and web_wgsl_kernels_test).
//
//   node --experimental-websocket web/test/webgpu_browser_test.mjs [--workgroup]   (ctest -L web runs it)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { openChromium } from './chromium.mjs';
import { check, finish, requireWebBuild, sourceDir, webDir } from './harness.mjs';

requireWebBuild();
if (spawnSync('sh', ['-c', `command -v ${process.env.CHROMIUM || 'chromium'}`]).status !== 0) {
  console.log('SKIP: chromium not installed (bash tools/setup.sh)');
  process.exit(77);
}
if (typeof WebSocket !== 'function') {
  console.log('FAIL: run with node --experimental-websocket');
  process.exit(1);
}

const goldenRoot = path.join(sourceDir, 'tests/goldens/model');
const goldens = fs.readdirSync(goldenRoot).sort();
const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
                '.wasm': 'application/wasm', '.json': 'application/json' };
const server = http.createServer((req, res) => {
  const p = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  if (p === '/') {
    res.writeHead(200, { 'Content-Type': types['.html'] }).end('<!doctype html><title>webgpu</title>');
    return;
  }
  const file = p.startsWith('/golden/') ? path.join(goldenRoot, p.slice(8)) : path.join(webDir, p);
  if (!fs.existsSync(file) || fs.statSync(file).isDirectory()) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'Content-Type': types[path.extname(file)] ?? 'application/octet-stream' });
  res.end(fs.readFileSync(file));
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}`;

const { cdp, js, close } = await openChromium({ prefix: 'gemma-webgpu-', args: ['--enable-unsafe-webgpu'] });
try {
  await cdp('Page.navigate', { url: `${base}/` });
  for (let i = 0; i < 100 && !(await js('document.readyState === "complete"').catch(() => false)); ++i) {
    await new Promise((r) => setTimeout(r, 50));
  }
  for (const name of goldens) {
    const g = JSON.parse(fs.readFileSync(path.join(goldenRoot, name, 'goldens.json'), 'utf8'));
    const qat = g.storage === 'qat';
    const result = await js(`(async () => {
      const { loadEngine } = await import('${base}/lib/gemma-engine.mjs');
      const url = '${base}/golden/${name}/';
      const model = { url, files: ['config.json', 'model.safetensors'], optional: [] };
      const g = ${JSON.stringify({ prompts: g.prompts, greedy: g.greedy })};
      const out = { tokens: [], worst: 0 };
      const engine = await loadEngine({ model, backend: 'webgpu', context: 256 });
      out.backend = engine.info.backend;
      out.device = engine.info.device;
      const V = engine.info.vocab_size;
      const t0 = performance.now();
      for (const [i, prompt] of g.prompts.entries()) {
        const r = await engine.newSession().generate({ prompt },
          { max_tokens: g.greedy[i].length, temperature: 0, ignore_eos: true });
        out.tokens.push(r.tokens);
        const seq = [...prompt, ...g.greedy[i].slice(0, -1)];
        const s = await engine.newSession().score(seq, { logits: true });
        const got = s.logits.flat();
        const want = new Float32Array(await (await fetch(url + 'logits_' + i + '.f32')).arrayBuffer());
        for (let t = 0; t < seq.length; ++t) {
          let num = 0, den = 0;
          for (let k = t * V; k < (t + 1) * V; ++k) {
            num += (got[k] - want[k]) ** 2;
            den += want[k] ** 2;
          }
          out.worst = Math.max(out.worst, Math.sqrt(num / den));
        }
      }
      out.ms = performance.now() - t0;
      await engine.destroy();
      if (${JSON.stringify(name)} === ${JSON.stringify(goldens[0])}) {
        const auto = await loadEngine({ model, backend: 'auto', context: 256 });
        out.auto = auto.info.backend;
        await auto.destroy();
      }
      return out;
    })()`);
    check(result.backend === 'webgpu' && result.device.length > 0, `${name}: backend ${result.backend} on '${result.device}'`);
    for (let i = 0; i < g.prompts.length; ++i) {
      check(JSON.stringify(result.tokens[i]) === JSON.stringify(g.greedy[i]),
            `${name} prompt ${i}: ${result.tokens[i]} vs transformers ${g.greedy[i]}`);
    }
    if (!qat) check(result.worst <= 1e-4, `${name}: logits rel L2 ${result.worst}`);
    if (result.auto) check(result.auto === 'webgpu', `auto picked ${result.auto}`);
    console.log(`Chromium WebGPU (${result.device}) ${name}: greedy identical to transformers, worst logits rel L2 ${result.worst.toExponential(2)}${qat ? ' (QAT)' : ''}, ${result.ms.toFixed(0)} ms`);
  }
  // The workgroup kernels in the browser, with subgroup reductions where Chromium's adapter has
  // `subgroups` (the WGSL with `enable subgroups;` through Chromium's own compiler): tiny_qat's
  // second prompt, 8 greedy tokens.
  if (process.argv.includes('--workgroup')) {
    const g = JSON.parse(fs.readFileSync(path.join(goldenRoot, 'tiny_qat', 'goldens.json'), 'utf8'));
    const result = await js(`(async () => {
      const { loadEngine } = await import('${base}/lib/gemma-engine.mjs');
      const model = { url: '${base}/golden/tiny_qat/', files: ['config.json', 'model.safetensors'], optional: [] };
      const adapter = await navigator.gpu.requestAdapter();
      const out = { subgroups: adapter.features.has('subgroups') };
      const engine = await loadEngine({ model, backend: 'webgpu', webgpu: { kernels: 'workgroup' }, context: 256 });
      out.device = engine.info.device;
      const t0 = performance.now();
      out.tokens = (await engine.newSession().generate({ prompt: ${JSON.stringify(g.prompts[1])} },
        { max_tokens: 8, temperature: 0, ignore_eos: true })).tokens;
      out.ms = performance.now() - t0;
      await engine.destroy();
      return out;
    })()`);
    const want = result.subgroups ? 'workgroup kernels with subgroups' : 'workgroup kernels';
    check(result.device.endsWith(want), `workgroup kernels: device '${result.device}', want '${want}'`);
    check(JSON.stringify(result.tokens) === JSON.stringify(g.greedy[1].slice(0, 8)),
          `tiny_qat (${want}): ${result.tokens} vs transformers ${g.greedy[1].slice(0, 8)}`);
    console.log(`Chromium WebGPU (${result.device}) tiny_qat: 8 greedy tokens identical to transformers, ${result.ms.toFixed(0)} ms`);
  }
} catch (e) {
  check(false, e.message);
} finally {
  await close();
  server.close();
}
finish('web_webgpu_browser_test');
