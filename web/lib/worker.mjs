// The engine's worker (a module Web Worker in the page, a worker_threads Worker under Node): it
// owns the WebAssembly module and runs every call of gemma-engine.mjs, so generation never blocks
// the page. Messages: {id, type, ...} in; {id, ok} or {id, error: {code, message, param}} out,
// and {id, type: "token", ...} while a generation streams.
//
// Cancel and backpressure use a SharedArrayBuffer of the caller's (Int32 [cancel, acked]): the
// token callback reads the cancel word, and waits (Atomics.wait) while more than `window` tokens
// are unacknowledged by the caller's onToken. Without one (a page that is not cross-origin
// isolated) tokens still stream, but a cancel takes effect when the generation ends.

const isNode = typeof process === 'object' && typeof process.versions?.node === 'string' &&
               typeof self === 'undefined';
let port;
if (isNode) {
  const { parentPort } = await import('node:worker_threads');
  port = { post: (m) => parentPort.postMessage(m), on: (f) => parentPort.on('message', f) };
} else {
  port = { post: (m) => self.postMessage(m), on: (f) => self.addEventListener('message', (e) => f(e.data)) };
}

let M = null;            // the Emscripten module
const engines = new Map();   // handle -> embind Engine
const sessions = new Map();  // id -> embind Session
let nextSession = 1;

function unwrap(text) {
  const r = JSON.parse(text);
  if (r.error) throw Object.assign(new Error(r.error.message), { gemma: r.error });
  return r.ok;
}

// threads > 1 where SharedArrayBuffer works (Node; a cross-origin isolated page) loads the pthreads
// build beside the module (gemma-engine-mt.js: tools/build-web.sh with THREADS=1) with threads - 1
// Workers; without it, or when it is absent, the single-threaded module and one thread.
let threadsUsed = 1;
async function init(msg) {
  if (M) return;
  const want = Math.max(1, Math.floor(msg.threads ?? 1));
  const shared = typeof SharedArrayBuffer === 'function' && (isNode || globalThis.crossOriginIsolated);
  if (want > 1 && shared) {
    const mtUrl = msg.moduleUrl.replace(/\.js$/, '-mt.js');
    try {
      await load({ moduleUrl: mtUrl, wasmUrl: mtUrl.replace(/\.js$/, '.wasm'), pthreads: want - 1 });
      threadsUsed = want;
      return;
    } catch {
      M = null;  // no pthreads build here: the single-threaded module
    }
  }
  await load({ ...msg, gpu: await nodeGpu(msg), gpuKernels: msg.webgpu?.kernels,
              gpuSubgroups: msg.webgpu?.subgroups,
              gpuMatvecWorkgroups: msg.webgpu?.matvecWorkgroups,
              gpuRejectSubgroupShaders: msg.webgpu?.rejectSubgroupShaders,
              gpuRejectKernels: msg.webgpu?.rejectKernels });
}

// The GPU for the WebGPU backend: the page's navigator.gpu, or under Node Dawn's (the npm
// package `webgpu`, resolved from msg.webgpu.module, created with msg.webgpu.flags).
async function nodeGpu(msg) {
  if (!isNode || !msg.webgpu || (msg.backend !== 'webgpu' && msg.backend !== 'auto')) return undefined;
  // The package is an ES module: resolved to its main file, then imported (require() of an ES
  // module needs Node 20.19+).
  const { createRequire } = await import('node:module');
  const { pathToFileURL } = await import('node:url');
  const main = createRequire(import.meta.url).resolve(msg.webgpu.module ?? 'webgpu');
  const dawn = await import(pathToFileURL(main).href);
  Object.assign(globalThis, dawn.globals);
  return dawn.create(msg.webgpu.flags ?? []);
}

async function load({ moduleUrl, wasmUrl, pthreads, gpu, gpuKernels, gpuSubgroups, gpuMatvecWorkgroups,
                      gpuRejectSubgroupShaders, gpuRejectKernels }) {
  let wasmBinary;
  if (isNode) {
    // Emscripten 3.1.6's ES module output reaches for CommonJS names under Node.
    const { createRequire } = await import('node:module');
    const { fileURLToPath } = await import('node:url');
    const path = await import('node:path');
    const fs = await import('node:fs');
    globalThis.require ??= createRequire(moduleUrl);
    globalThis.__dirname ??= path.dirname(fileURLToPath(moduleUrl));
    wasmBinary = fs.readFileSync(fileURLToPath(wasmUrl));
  }
  const { default: create } = await import(moduleUrl);
  // The pthreads build starts its Workers with the module (at least one: 3.1.6 never resolves an
  // empty pool's load).
  const opts = pthreads ? { gemmaPthreads: Math.max(1, pthreads) } : {};
  if (gpu) opts.gpu = gpu;
  if (gpuKernels) opts.gpuKernels = gpuKernels;
  if (gpuSubgroups !== undefined) opts.gpuSubgroups = gpuSubgroups;
  if (gpuMatvecWorkgroups !== undefined) opts.gpuMatvecWorkgroups = gpuMatvecWorkgroups;
  if (gpuRejectSubgroupShaders) opts.gpuRejectSubgroupShaders = true;
  if (gpuRejectKernels) opts.gpuRejectKernels = gpuRejectKernels;
  M = await create(wasmBinary ? { wasmBinary, ...opts }
                              : { locateFile: (f) => (f.endsWith('.wasm') ? wasmUrl : new URL(f, wasmUrl).href), ...opts });
}

let mounts = 0;
// model: a directory path (Node), File objects (WORKERFS, read in slices), or {url, files} to
// fetch into memory. Returns the directory inside the module's file system.
async function mountModel(model, onProgress) {
  const dir = `/models/m${++mounts}`;
  M.FS.mkdirTree(dir);
  if (typeof model === 'string') {
    if (!isNode) throw Object.assign(new Error('a model path needs Node; in a page pass File objects or {url}'), { gemma: { code: 'invalid_argument' } });
    const fs = await import('node:fs');
    if (!fs.existsSync(model)) throw Object.assign(new Error(`${model}: no such file or directory`), { gemma: { code: 'io' } });
    M.FS.mount(M.NODEFS, { root: fs.realpathSync(model) }, dir);
  } else if (Array.isArray(model) && model.length && typeof Blob !== 'undefined' &&
             model[0] instanceof Blob) {
    M.FS.mount(M.WORKERFS, { files: model.map((f) => new File([f], f.name.split('/').pop())) }, dir);
  } else if (model && model.url) {
    const base = String(model.url).replace(/\/?$/, '/');
    const files = model.files ?? ['config.json', 'model.safetensors', 'tokenizer.json'];
    const optional = model.optional ?? ['generation_config.json', 'chat_template.jinja'];
    for (const name of [...files, ...optional]) {
      const res = await fetch(base + name);
      if (!res.ok) {
        if (optional.includes(name)) continue;
        throw Object.assign(new Error(`${base + name}: HTTP ${res.status}`), { gemma: { code: 'io' } });
      }
      const total = Number(res.headers.get('content-length')) || 0;
      const reader = res.body.getReader();
      const chunks = [];
      let got = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        chunks.push(value);
        got += value.length;
        onProgress({ file: name, loaded: got, total });
      }
      const bytes = new Uint8Array(got);
      let at = 0;
      for (const c of chunks) { bytes.set(c, at); at += c.length; }
      M.FS.writeFile(`${dir}/${name}`, bytes);
    }
  } else {
    throw Object.assign(new Error('model must be a directory path (Node), File objects or {url}'),
                        { gemma: { code: 'invalid_argument' } });
  }
  return dir;
}

const handlers = {
  async load(msg, progress) {
    await init(msg);
    const dir = await mountModel(msg.model, progress);
    // (With the WebGPU backend a call may suspend while the GPU works: embind then returns a
    // Promise, hence the awaits.)
    const info = unwrap(await M.Engine.load(JSON.stringify({
      model_path: dir, backend: msg.backend ?? 'auto',
      context: msg.context ?? 4096, threads: threadsUsed, model_id: msg.name ?? 'model' })));
    info.threads = threadsUsed;
    engines.set(info.handle, M.Engine.get(info.handle));
    return info;
  },
  newSession({ engine }) {
    const s = engines.get(engine).newSession();
    const id = nextSession++;
    sessions.set(id, s);
    return id;
  },
  async generate({ id, session, input, options, control, window: win }) {
    const s = sessions.get(session);
    const ctl = control ? new Int32Array(control) : null;
    let sent = 0;
    const onToken = (tok, index, delta, logprob) => {
      try {
        port.post({ id, type: 'token', token: tok, index, delta, logprob });
        ++sent;
        if (!ctl) return false;
        while (Atomics.load(ctl, 0) === 0 && sent - Atomics.load(ctl, 1) > win) {
          Atomics.wait(ctl, 1, Atomics.load(ctl, 1), 50);
        }
        return Atomics.load(ctl, 0) !== 0;
      } catch {
        return true;  // never let a JavaScript exception unwind through the engine
      }
    };
    return unwrap(await s.generate(JSON.stringify(input), JSON.stringify(options), onToken));
  },
  // The server's OpenAI endpoints on a session: SSE text streams as {type: "sse", text} events.
  async openai({ id, session, chat, body, control }) {
    const ctl = control ? new Int32Array(control) : null;
    const onEvent = (text) => {
      try {
        port.post({ id, type: 'sse', text });
        return ctl ? Atomics.load(ctl, 0) !== 0 : false;
      } catch {
        return true;
      }
    };
    const r = JSON.parse(await sessions.get(session).openai(!!chat, JSON.stringify(body), onEvent));
    if (r.error) throw Object.assign(new Error(r.error.body?.error?.message ?? 'refused'), { gemma: { code: 'http', ...r.error } });
    return r.ok;
  },
  props({ engine }) { return unwrap(engines.get(engine).props()); },
  reset({ session }) { return unwrap(sessions.get(session).reset()); },
  async score({ session, ids, logits }) {
    return unwrap(await sessions.get(session).score(JSON.stringify(ids), !!logits));
  },
  destroySession({ session }) {
    sessions.get(session)?.delete();
    sessions.delete(session);
    return null;
  },
  tokenize({ engine, text }) { return unwrap(engines.get(engine).tokenize(text)); },
  detokenize({ engine, ids }) { return unwrap(engines.get(engine).detokenize(JSON.stringify(ids))); },
  prompt({ engine, input }) { return unwrap(engines.get(engine).prompt(JSON.stringify(input))); },
  info({ engine }) { return unwrap(engines.get(engine).info()); },
  destroy({ engine }) {
    engines.get(engine)?.delete();
    engines.delete(engine);
    M.Engine.destroy(engine);
    return null;
  },
  loseDevice() {
    if (M.loseWebGpuDevice) M.loseWebGpuDevice();
    return null;
  },
  conformance(msg) { return unwrap(M.conformance(JSON.stringify(msg.request))); },
};

// One call at a time: a call suspended on the GPU must not be entered again (Asyncify).
let queue = Promise.resolve();
port.on((msg) => { queue = queue.then(() => run(msg)); });

async function run(msg) {
  try {
    const progress = (p) => port.post({ id: msg.id, type: 'progress', ...p });
    const ok = await handlers[msg.type](msg, progress);
    port.post({ id: msg.id, ok: ok ?? null });
  } catch (e) {
    port.post({ id: msg.id, error: e.gemma ? { ...e.gemma, message: e.gemma.message ?? e.message }
                                          : { code: 'internal', message: String(e?.message ?? e) } });
  }
}
