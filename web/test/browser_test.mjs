// Headless Chromium (Debian's `chromium`) runs the console of the WebAssembly build from a
// loopback static server (cross-origin isolated: COOP/COEP) with the engine in the page: the
// model is downloaded into the Origin Private File System (the server drops the first transfer
// of model.safetensors half-way; Download resumes it with a Range request), loaded, asked a
// question answered as the native build answers it, streamed and stopped mid-answer; after a
// reload the cached model loads with no download. Screenshots go to
// GEMMA_BINARY_DIR/test_artifacts/web_console/.
//
//   node --experimental-websocket web/test/browser_test.mjs   (ctest -L web runs it)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { openChromium } from './chromium.mjs';
import { check, finish, requireWebBuild, sourceDir, webDir } from './harness.mjs';

requireWebBuild();
const chromium = process.env.CHROMIUM || 'chromium';
if (spawnSync('sh', ['-c', `command -v ${chromium}`]).status !== 0) {
  console.log('SKIP: chromium not installed (bash tools/setup.sh)');
  process.exit(77);
}
if (typeof WebSocket !== 'function') {
  console.log('FAIL: run with node --experimental-websocket');
  process.exit(1);
}
const outDir = path.join(process.env.GEMMA_BINARY_DIR ?? os.tmpdir(), 'test_artifacts/web_console');
fs.mkdirSync(outDir, { recursive: true });

// ------------------------------------------------------------------ the static server
const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
                '.css': 'text/css', '.wasm': 'application/wasm', '.json': 'application/json' };
const log = [];  // {path, range, bytes}
let dropped = false;
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const file = url.pathname.startsWith('/models/')
    ? path.join(sourceDir, decodeURIComponent(url.pathname))
    : path.join(webDir, decodeURIComponent(url.pathname));
  const headers = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp',
                    'Cross-Origin-Resource-Policy': 'same-origin', 'Cache-Control': 'no-store',
                    'Accept-Ranges': 'bytes' };
  let stat;
  try {
    stat = fs.statSync(file);
  } catch {
    res.writeHead(404, headers).end('not found');
    return;
  }
  if (stat.isDirectory()) {
    res.writeHead(302, { ...headers, Location: url.pathname.replace(/\/?$/, '/') + 'index.html' }).end();
    return;
  }
  headers['Content-Type'] = types[path.extname(file)] ?? 'application/octet-stream';
  const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
  const start = m ? Number(m[1]) : 0;
  const entry = { path: url.pathname, range: req.headers.range ?? null, bytes: 0 };
  log.push(entry);
  if (m && start >= stat.size) {
    res.writeHead(416, { ...headers, 'Content-Range': `bytes */${stat.size}` }).end();
    return;
  }
  if (m) {
    res.writeHead(206, { ...headers, 'Content-Range': `bytes ${start}-${stat.size - 1}/${stat.size}`,
                         'Content-Length': stat.size - start });
  } else {
    res.writeHead(200, { ...headers, 'Content-Length': stat.size });
  }
  const body = fs.readFileSync(file).subarray(start);
  if (!dropped && !m && file.endsWith('model.safetensors')) {
    // The first transfer breaks half-way: the connection drops.
    dropped = true;
    const half = Math.floor(body.length / 2);
    res.write(body.subarray(0, half), () => { entry.bytes = half; setTimeout(() => res.socket.destroy(), 50); });
    return;
  }
  entry.bytes = body.length;
  res.end(body);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}`;

// ------------------------------------------------------------------ browser and protocol
const consoleLines = [];
const { cdp, js, close } = await openChromium({
  prefix: 'gemma-web-console-',
  args: ['--window-size=1280,860'],
  onEvent: (msg) => {
    if (msg.method === 'Runtime.exceptionThrown') {
      consoleLines.push('exception: ' + (msg.params.exceptionDetails.exception?.description ??
                                         msg.params.exceptionDetails.text));
    }
  },
});
async function waitFor(expression, ms = 60000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await js(expression).catch(() => null);  // the page may be loading
    if (v) return v;
    if (Date.now() > end) {
      const status = await js(`document.getElementById('model-status')?.textContent`).catch(() => '?');
      throw new Error(`timed out waiting for ${expression} (model status: ${status})`);
    }
    await new Promise((r) => setTimeout(r, 40));
  }
}
async function shot(name) {
  const r = await cdp('Page.captureScreenshot', { format: 'png' });
  fs.writeFileSync(path.join(outDir, name + '.png'), Buffer.from(r.data, 'base64'));
}
const set = (id, v) => js(`(() => { const e = document.getElementById(${JSON.stringify(id)});
  e.value = ${JSON.stringify(String(v))}; e.dispatchEvent(new Event('change')); })()`);
const text = (id) => js(`document.getElementById(${JSON.stringify(id)}).textContent`);
const click = (sel) => js(`document.querySelector(${JSON.stringify(sel)}).click()`);
async function send(prompt) {
  await js(`document.getElementById('prompt').value = ${JSON.stringify(prompt)}`);
  await click('#send');
}
const idle = () => waitFor(`document.getElementById('stop').disabled && !document.querySelector('.streaming')`, 120000);
const lastAssistant = () => js(`(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop();
  return m ? m.querySelector('.content').textContent : null; })()`);
const served = (suffix) => log.filter((e) => e.path.endsWith(suffix));

async function step(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    check(false, `${name}: ${e.message}`);
    await shot('failed-' + name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()).catch(() => {});
  }
}

await cdp('Page.enable');
await cdp('Runtime.enable');
await cdp('Page.navigate', { url: `${base}/console/index.html` });
const size = fs.statSync(path.join(sourceDir, 'models/tiny-trained/model.safetensors')).size;

await step('no server: the in-page transport and the Model panel', async () => {
  await waitFor(`!document.getElementById('model-panel').hidden`);
  check(await js('crossOriginIsolated'), 'the page is not cross-origin isolated');
});

await step('an interrupted download resumes with a Range request', async () => {
  await set('model-url', '../models/tiny-trained/');
  await set('model-name', 'tiny-trained');
  await click('#model-download');
  await waitFor(`document.getElementById('model-status').textContent.includes('download stopped')`);
  await waitFor(`document.querySelector('#model-list li[data-model="tiny-trained"]')?.textContent.includes('partial')`);
  await shot('1-interrupted');
  await click('#model-download');
  await waitFor(`document.getElementById('model-info').textContent.includes('tiny-trained')`, 120000);
  // The resume asks for the rest after what the cache kept (at most what was sent: the browser
  // may not have written the last chunks before the drop) and gets exactly that.
  const parts = served('model.safetensors');
  const kept = Number(/^bytes=(\d+)-$/.exec(parts[1]?.range ?? '')?.[1] ?? -1);
  check(parts.length === 2 && kept > 0 && kept <= parts[0].bytes && kept + parts[1].bytes === size,
        `model.safetensors transfers: ${JSON.stringify(parts)} (file ${size} bytes)`);
  console.log(`     dropped after ${parts[0].bytes} of ${size} bytes; resumed from byte ${kept}`);
  const info = await text('model-info');
  check(info.includes('cpu-fast') && info.includes('in this page'), `model info: ${info}`);
  // The page is cross-origin isolated: with the pthreads build beside the module (THREADS=1
  // tools/build-web.sh) it runs one thread per core (the answers below are then the threaded
  // engine's); without it, the single-threaded module.
  const cores = await js('navigator.hardwareConcurrency');
  const threaded = fs.existsSync(path.join(webDir, 'gemma-engine-mt.js')) && cores > 1;
  const st = await text('model-status');
  check(threaded === /\d+ threads/.test(st), `model status '${st}' (pthreads build ${threaded ? '' : 'not '}expected)`);
  console.log(`     ${st}`);
});

await step('generate: the greedy answer of the native build', async () => {
  await set('temperature', 0);
  await set('max_tokens', 40);
  await send('Hello! Who are you?');
  await idle();
  const answer = await lastAssistant();
  const want = 'Hello! I am a small language model trained on Debian documentation. I can answer short questions about Debian, Python and free software in plain English.';
  check(answer === want, `answer: ${JSON.stringify(answer)}`);
  check(await text('t-finish') === 'stop', `finish: ${await text('t-finish')}`);
  await shot('2-answer');
});

await step('stream and stop mid-answer', async () => {
  await set('max_tokens', 1000);
  await set('temperature', 0.8);
  await set('seed', 1);
  await js(`document.getElementById('ignore_eos').checked = true`);
  await send('Tell me about Debian packages.');
  await waitFor(`(document.querySelector('.content.streaming')?.textContent.length ?? 0) > 40`);
  const partial = (await js(`document.querySelector('.content.streaming').textContent`)).length;
  await click('#stop');
  await idle();
  const final = (await lastAssistant()).length;
  check(final >= partial && final < 20000, `text after stop: ${final} characters (seen streaming: ${partial})`);
  check(await text('t-finish') === 'stopped', `finish after stop: ${await text('t-finish')}`);
  await js(`document.getElementById('ignore_eos').checked = false`);
  await shot('3-stopped');
  // The session is usable after the cancel.
  await set('max_tokens', 8);
  await set('temperature', 0);
  await send('Hi');
  await idle();
  check((await lastAssistant()).length > 0, 'no answer after a stop');
});

await step('reload: the cached model loads without a download', async () => {
  const before = served('model.safetensors').length;
  await cdp('Page.reload');
  await waitFor(`document.querySelector('#model-list li[data-model="tiny-trained"] .model-load')?.textContent === 'Load'`);
  // The estimate is written after the list (refresh() awaits it last).
  await waitFor(`document.getElementById('storage-estimate').textContent.includes('MiB used')`);
  await click('#model-list li[data-model="tiny-trained"] .model-load');
  await waitFor(`document.getElementById('model-info').textContent.includes('tiny-trained')`);
  check(served('model.safetensors').length === before, 'the model was downloaded again');
  await shot('4-reloaded');
});

check(consoleLines.length === 0, `the page threw:\n${consoleLines.join('\n')}`);
await close();
server.close();
finish('web_browser_test');
