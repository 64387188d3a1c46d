// The console's in-page transport (the WebAssembly build's static files): the OpenAI paths the
// console uses (props, v1/chat/completions) answered by the engine in a worker through the
// server's own code (Session.openai: request checks, samples, SSE chunks), plus the Model panel:
// download into the browser's storage (resumable), the cache's inventory and deletion, files
// picked from the disk, and a storage estimate. app.js loads this module only when no server
// answers `props`.
import { loadEngine } from '../lib/gemma-engine.mjs';
import * as cache from '../lib/model-cache.mjs';

const $ = (id) => document.getElementById(id);
const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
const apiError = (status, message, type = 'invalid_request_error') => json(status, { error: { message, type, param: null, code: null } });
const mib = (n) => `${(n / 1048576).toFixed(1)} MiB`;

export async function engineTransport({ onReady }) {
  let engine = null;
  let session = null;
  let loading = null;

  const status = (text) => { $('model-status').textContent = text; };

  async function use(model, name) {
    if (loading) return loading;
    loading = (async () => {
      status(`loading ${name}…`);
      // WebGPU where the page has an adapter (the single-threaded module: the pthreads build has
      // no WebGPU backend); otherwise a cross-origin isolated page runs the pthreads build when it
      // is there (one thread per core, at most 4), else the single-threaded module.
      const backend = $('model-backend')?.value || 'auto';
      const gpu = backend !== 'cpu' && globalThis.navigator?.gpu
        ? await navigator.gpu.requestAdapter().catch(() => null) : null;
      const threads = !gpu && globalThis.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
      const next = await loadEngine({ model, name, backend, threads });
      if (engine) await engine.destroy();
      engine = next;
      session = engine.newSession();
      status(`${name}: loaded in ${engine.info.load_ms.toFixed(0)} ms` +
             (engine.info.device ? ` on ${engine.info.device}` : '') +
             (engine.info.threads > 1 ? `, ${engine.info.threads} threads` : ''));
      onReady();
    })();
    try {
      await loading;
    } catch (e) {
      status(`${name}: ${e.message}`);
    } finally {
      loading = null;
    }
  }

  async function refresh() {
    const list = $('model-list');
    list.replaceChildren();
    for (const m of await cache.list()) {
      const li = document.createElement('li');
      li.dataset.model = m.name;
      li.append(`${m.name} · ${mib(m.bytes)}${m.complete ? '' : ' (partial)'} `);
      const load = document.createElement('button');
      load.type = 'button';
      load.className = 'model-load';
      load.textContent = m.complete ? 'Load' : 'Resume';
      load.onclick = async () => (m.complete ? use(await cache.files(m.name), m.name)
                                             : fetchModel(m.name, m.url));
      const del = document.createElement('button');
      del.type = 'button';
      del.className = 'ghost model-delete';
      del.textContent = 'Delete';
      del.onclick = async () => { await cache.remove(m.name); refresh(); };
      li.append(load, ' ', del);
      list.append(li);
    }
    const e = await cache.estimate();
    $('storage-estimate').textContent = `storage: ${mib(e.usage)} used of ${mib(e.quota)}${e.persisted ? ' (persistent)' : ''}`;
  }

  async function fetchModel(name, url) {
    const bar = $('model-progress');
    bar.hidden = false;
    try {
      await cache.download(name, new URL(url, location.href).href, {
        onProgress: (p) => {
          bar.value = p.total ? p.loaded / p.total : 0;
          status(`${p.file}: ${mib(p.loaded)}${p.total ? ' of ' + mib(p.total) : ''}`);
        },
      });
      status(`${name}: downloaded`);
      await refresh();
      await use(await cache.files(name), name);
    } catch (e) {
      status(`${name}: download stopped (${e.message}); Download resumes it`);
      await refresh();
    } finally {
      bar.hidden = true;
    }
  }

  $('model-panel').hidden = false;
  $('model-download').onclick = () => fetchModel($('model-name').value.trim(), $('model-url').value.trim());
  $('model-files').onchange = () => {
    const files = [...$('model-files').files];
    if (files.length) use(files, files.find((f) => f.name === 'config.json') ? $('model-name').value.trim() : 'model');
  };
  await refresh();

  async function chat(init) {
    let body;
    try {
      body = JSON.parse(init.body);
    } catch {
      return apiError(400, 'the request body is not valid JSON');
    }
    const signal = init.signal;
    if (!body.stream) {
      try {
        return json(200, await session.openai(true, body, { signal }));
      } catch (e) {
        return json(e.status ?? 500, e.body ?? { error: { message: e.message, type: 'server_error' } });
      }
    }
    // Streaming: the Response is returned at the first event (the request passed its checks) or
    // with the refusal; events then flow as the worker posts them.
    let controller;
    let open = true;  // events after an abort (the worker's last ones) are dropped
    const stream = new ReadableStream({ start: (c) => { controller = c; } });
    const end = (error) => {
      if (!open) return;
      open = false;
      error ? controller.error(error) : controller.close();
    };
    const enc = new TextEncoder();
    let started;
    const first = new Promise((resolve) => { started = resolve; });
    const done = session.openai(true, body, {
      signal,
      onEvent: (text) => { started(); if (open) controller.enqueue(enc.encode(text)); },
    }).then(() => end(), (e) => {
      end(signal?.aborted ? new DOMException('aborted', 'AbortError') : undefined);
      throw e;
    });
    signal?.addEventListener('abort', () => end(new DOMException('aborted', 'AbortError')));
    try {
      await Promise.race([first, done]);
    } catch (e) {
      return json(e.status ?? 500, e.body ?? { error: { message: e.message, type: 'server_error' } });
    }
    done.catch(() => {});
    return new Response(stream, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  }

  return {
    kind: 'engine',
    async fetch(path, init = {}) {
      if (loading) await loading.catch(() => {});
      if (!engine) return apiError(503, 'no model loaded: download or pick one under Model', 'service_unavailable');
      if (path === 'props') return json(200, await engine.props());
      if (path === 'v1/chat/completions') return chat(init);
      return apiError(404, `${path}: not served in the page`, 'not_found_error');
    },
  };
}
