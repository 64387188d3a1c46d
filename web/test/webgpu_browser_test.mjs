// The WebGPU backend in headless Chromium (Debian's `chromium` with --enable-unsafe-webgpu:
// SwiftShader's WebGPU, f32): a page on a loopback static server loads the library, fetches a
// transformers golden model (tests/goldens/model/tiny_dense_bf16) and decodes its golden prompts
// greedily with backend "webgpu"; the tokens must equal transformers'. Also: "auto" picks WebGPU
// there, and the engine reports the adapter.
//
//   node --experimental-websocket web/test/webgpu_browser_test.mjs   (ctest -L web runs it)
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

const golden = path.join(sourceDir, 'tests/goldens/model/tiny_dense_bf16');
const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
                '.wasm': 'application/wasm', '.json': 'application/json' };
const server = http.createServer((req, res) => {
  const p = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  if (p === '/') {
    res.writeHead(200, { 'Content-Type': types['.html'] }).end('<!doctype html><title>webgpu</title>');
    return;
  }
  const file = p.startsWith('/golden/') ? path.join(golden, p.slice(8)) : path.join(webDir, p);
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
  const g = JSON.parse(fs.readFileSync(path.join(golden, 'goldens.json'), 'utf8'));
  const result = await js(`(async () => {
    const { loadEngine } = await import('${base}/lib/gemma-engine.mjs');
    const model = { url: '${base}/golden/', files: ['config.json', 'model.safetensors'], optional: [] };
    const out = {};
    for (const backend of ['webgpu', 'auto']) {
      const engine = await loadEngine({ model, backend, context: 256 });
      out[backend] = { backend: engine.info.backend, device: engine.info.device, tokens: [] };
      if (backend === 'webgpu') {
        const t0 = performance.now();
        for (const [i, prompt] of ${JSON.stringify(g.prompts)}.entries()) {
          const r = await engine.newSession().generate({ prompt },
            { max_tokens: ${JSON.stringify(g.greedy.map((x) => x.length))}[i], temperature: 0, ignore_eos: true });
          out[backend].tokens.push(r.tokens);
        }
        out[backend].ms = performance.now() - t0;
      }
      await engine.destroy();
    }
    return out;
  })()`);
  const w = result.webgpu;
  check(w.backend === 'webgpu' && w.device.length > 0, `backend ${w.backend} on '${w.device}'`);
  for (let i = 0; i < g.prompts.length; ++i) {
    check(JSON.stringify(w.tokens[i]) === JSON.stringify(g.greedy[i]),
          `prompt ${i}: ${w.tokens[i]} vs transformers ${g.greedy[i]}`);
  }
  check(result.auto.backend === 'webgpu', `auto picked ${result.auto.backend}`);
  const n = g.greedy.reduce((a, x) => a + x.length, 0);
  console.log(`Chromium WebGPU (${w.device}): ${g.prompts.length} golden prompts, ${n} tokens identical to transformers in ${w.ms.toFixed(0)} ms`);
} catch (e) {
  check(false, e.message);
} finally {
  await close();
  server.close();
}
finish('web_webgpu_browser_test');
