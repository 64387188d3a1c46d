// Decode speed of the WebAssembly module in headless Chromium (the library: the engine in a module
// Web Worker, a cross-origin isolated page) against the native command line, one thread,
// interleaved runs, medians (bench/journal/):
//   node --experimental-websocket bench/web/browser_bench.mjs [MODEL_DIR] [TOKENS] [RUNS] [opfs]
// opfs: instead, the load time of the checkpoint cached in the Origin Private File System (the
// page downloads it with model-cache.mjs, reloads, then times the cache's File objects to the
// first generated token: loadEngine (the module, the weights read in slices) + prefill).
// Needs build-web/ (tools/build-web.sh), build/tools/gemma-engine and Debian's chromium. The model
// is fetched by the page from a loopback server ({url} models are read into the worker's memory).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { openChromium } from '../../web/test/chromium.mjs';

const root = path.resolve(new URL('../..', import.meta.url).pathname);
const model = fs.realpathSync(process.argv[2] ?? path.join(root, 'models/tiny-trained'));
const tokens = Number(process.argv[3] ?? 128);
const runs = Number(process.argv[4] ?? 3);
const opfs = process.argv[5] === 'opfs';
const web = process.env.GEMMA_WEB_BUILD_DIR ?? path.join(root, 'build-web');
const cli = process.env.GEMMA_ENGINE ?? path.join(root, 'build/tools/gemma-engine');
const prompt = 'The Debian project';

const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
                '.wasm': 'application/wasm', '.json': 'application/json' };
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const headers = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp',
                    'Cross-Origin-Resource-Policy': 'same-origin', 'Cache-Control': 'no-store' };
  if (url.pathname === '/bench.html') {
    res.writeHead(200, { ...headers, 'Content-Type': types['.html'] }).end('<!doctype html><title>bench</title>');
    return;
  }
  const file = url.pathname.startsWith('/model/')
    ? path.join(model, decodeURIComponent(url.pathname.slice('/model/'.length)))
    : path.join(web, decodeURIComponent(url.pathname));
  if (!fs.existsSync(file) || fs.statSync(file).isDirectory()) {
    res.writeHead(404, headers).end();
    return;
  }
  res.writeHead(200, { ...headers, 'Content-Type': types[path.extname(file)] ?? 'application/octet-stream',
                       'Content-Length': fs.statSync(file).size });
  fs.createReadStream(file).pipe(res);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}`;

const { cdp, js, close } = await openChromium({ prefix: 'gemma-web-bench-' });

try {
  await cdp('Page.enable');
  await cdp('Page.navigate', { url: `${base}/bench.html` });
  for (let i = 0; i < 200 && !(await js('document.readyState === "complete"').catch(() => false)); ++i) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const browserInfo = await js('navigator.userAgent');
  if (opfs) {
    await js(`(async () => {
      const cache = await import('./lib/model-cache.mjs');
      await cache.remove('bench').catch(() => {});
      await cache.download('bench', new URL('model/', location.href).href);
      return true; })()`);
    const times = [];
    for (let i = 0; i < runs; ++i) {
      await cdp('Page.reload');
      await new Promise((r) => setTimeout(r, 500));
      for (let k = 0; k < 200 && !(await js('document.readyState === "complete"').catch(() => false)); ++k) {
        await new Promise((r) => setTimeout(r, 50));
      }
      times.push(await js(`(async () => {
        const cache = await import('./lib/model-cache.mjs');
        const { loadEngine } = await import('./lib/gemma-engine.mjs');
        const t0 = performance.now();
        const engine = await loadEngine({ model: await cache.files('bench'), backend: 'cpu', context: 1024 });
        const t1 = performance.now();
        const s = engine.newSession();
        let first = 0;
        await s.generate(${JSON.stringify(prompt)}, { max_tokens: 1, temperature: 0,
                                                     onToken: () => { first ||= performance.now(); } });
        await engine.destroy();
        return { load: t1 - t0, first: first - t0 }; })()`));
    }
    const bytes = fs.readdirSync(model).reduce((a, f) => a + fs.statSync(path.join(model, f)).size, 0);
    console.log(`${path.basename(model)} (${(bytes / 2 ** 20).toFixed(0)} MiB of files) cached in OPFS, ` +
                `${browserInfo.match(/Chrome\/\S+/)?.[0]}: loadEngine ${times.map((t) => t.load.toFixed(0)).join(' / ')} ms, ` +
                `first token ${times.map((t) => t.first.toFixed(0)).join(' / ')} ms after the start`);
    await js(`import('./lib/model-cache.mjs').then((c) => c.remove('bench'))`);
    throw null;  // done
  }
  const isolated = await js('crossOriginIsolated');
  await js(`(async () => {
    const { loadEngine } = await import('./lib/gemma-engine.mjs');
    const t0 = performance.now();
    window.engine = await loadEngine({ model: { url: new URL('model/', location.href).href }, backend: 'cpu', context: 1024 });
    window.loadMs = performance.now() - t0;
    return true; })()`);
  const wasm = () => js(`(async () => {
    const s = engine.newSession();
    const r = await s.generate(${JSON.stringify(prompt)}, { max_tokens: ${tokens}, ignore_eos: true, temperature: 0 });
    await s.destroy();
    return r.telemetry; })()`);
  const native = () => JSON.parse(execFileSync(cli, [
    'run', '--model', model, '-p', prompt, '-n', String(tokens), '--ignore-eos', '--temperature', '0',
    '--threads', '1', '--backend', 'cpu', '--context', '1024', '--json']).toString()).telemetry;
  await wasm();  // warm-up
  const rows = { 'wasm cpu (Chromium)': [], 'native cpu (fast)': [] };
  for (let i = 0; i < runs; ++i) {
    rows['wasm cpu (Chromium)'].push((await wasm()).decode_tok_s);
    rows['native cpu (fast)'].push(native().decode_tok_s);
  }
  const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
  const fast = median(rows['native cpu (fast)']);
  console.log(`${path.basename(model)}: ${tokens} tokens after '${prompt}', 1 thread, median of ${runs}; ` +
              `${browserInfo.match(/Chrome\/\S+/)?.[0]}, cross-origin isolated ${isolated}, page load ${(await js('loadMs')).toFixed(0)} ms`);
  for (const [name, v] of Object.entries(rows)) {
    console.log(`  ${name.padEnd(22)} decode ${median(v).toFixed(1).padStart(7)} tok/s  (${(median(v) / fast).toFixed(2)}x native fast)  ` +
                `runs ${v.map((x) => x.toFixed(0)).join(' ')}`);
  }
} catch (e) {
  if (e !== null) {
    console.log(`FAILED: ${e.message}`);
    process.exitCode = 1;
  }
} finally {
  await close();
  server.close();
}
