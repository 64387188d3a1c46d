// Headless Chromium (Debian's `chromium`, or $CHROMIUM) with one page driven over the DevTools
// protocol: the browser tests (web/test/browser_test.mjs, tests/server/console_browser.mjs) and the
// browser benchmark (bench/web/browser_bench.mjs). Needs node's WebSocket
// (node --experimental-websocket on node 18-21).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// Starts the browser on about:blank with a fresh profile (a temporary folder named from `prefix`)
// and connects to its page. `onEvent(message)` sees every protocol event; `args` are added to the
// command line. Returns { browser, profile, debugPort, cdp(method, params), js(expression), close() }:
// js evaluates in the page (promises awaited) and returns the value or throws the page's error;
// close ends the browser (killed after 5 s) and removes the profile.
export async function openChromium({ prefix = 'gemma-chromium-', onEvent = () => {}, args = [] } = {}) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const browser = spawn(process.env.CHROMIUM || 'chromium', [
    '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
    '--disable-extensions', '--disable-background-networking', '--disable-sync',
    '--disable-component-update', '--disable-default-apps', '--remote-debugging-port=0',
    `--user-data-dir=${profile}`, ...args, 'about:blank',
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  const wsUrl = await new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error('chromium did not start: ' + err)), 30000);
    browser.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/DevTools listening on (ws:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    browser.on('exit', (code) => reject(new Error(`chromium exited ${code}: ${err}`)));
  });
  const debugPort = new URL(wsUrl).port;
  const targets = await (await fetch(`http://127.0.0.1:${debugPort}/json/list`)).json();
  const ws = new WebSocket(targets.find((t) => t.type === 'page').webSocketDebuggerUrl);
  await new Promise((r, j) => { ws.onopen = r; ws.onerror = j; });
  let nextId = 1;
  const pending = new Map();
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(msg.error.message)); else resolve(msg.result);
    } else if (msg.method) {
      onEvent(msg);
    }
  };
  const cdp = (method, params = {}) => new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    ws.send(JSON.stringify({ id, method, params }));
  });
  const js = async (expression) => {
    const r = await cdp('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error(r.exceptionDetails.exception?.description || expression);
    return r.result.value;
  };
  const close = async () => {
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    const exited = browser.exitCode !== null ? Promise.resolve()
                                              : new Promise((r) => browser.once('exit', r));
    cdp('Browser.close').catch(() => {});  // its answer may not come: the socket closes
    if (await Promise.race([exited.then(() => true), sleep(5000)]) !== true) browser.kill('SIGKILL');
    await Promise.race([exited, sleep(5000)]);
    ws.close();
    try {
      fs.rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
    } catch { /* a helper process of Chromium's may still be writing there */ }
  };
  return { browser, profile, debugPort, cdp, js, close };
}
