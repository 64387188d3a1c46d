// gemma-engine in the browser (and Node): the C++ engine compiled to WebAssembly, run in a worker.
//
//   import { loadEngine } from './lib/gemma-engine.mjs';
//   const engine = await loadEngine({ model: { url: 'models/tiny-trained/' } });
//   const session = engine.newSession();
//   const r = await session.generate([{ role: 'user', content: 'Hello!' }],
//       { max_tokens: 64, temperature: 0.7, seed: 1, signal, onToken: (t) => show(t.delta) });
//   // r.text, r.reasoning, r.tool_calls, r.tokens, r.logprobs, r.stop_reason, r.telemetry
//
// Options are the HTTP server's request fields (README, "Server"): temperature top_p top_k min_p
// typical_p repetition_penalty frequency_penalty presence_penalty penalty_window seed stop
// stop_token_ids logit_bias logprobs top_logprobs max_tokens ignore_eos cache_prompt
// response_format regex tools tool_choice chat_template_kwargs reasoning_effort speculative, with their
// defaults and checks; unset sampling fields take the checkpoint's generation_config.json.
// Errors are GemmaError with the engine's code (invalid_argument, capacity, cancelled, ...).
// docs/web.md has the whole API.

export class GemmaError extends Error {
  constructor({ code, message, param }) {
    super(message);
    this.name = 'GemmaError';
    this.code = code;
    if (param) this.param = param;
  }
}

const isNode = typeof process === 'object' && typeof process.versions?.node === 'string' &&
               typeof window === 'undefined';

// A worker speaking worker.mjs's protocol: call(type, fields) -> Promise, with per-call events.
class Channel {
  constructor(worker, nodeWorker) {
    this.worker = worker;
    this.pending = new Map();
    this.next = 1;
    const onMessage = (m) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      if (m.type === 'token' || m.type === 'progress' || m.type === 'sse') {
        p.onEvent?.(m);
      } else {
        this.pending.delete(m.id);
        m.error ? p.reject(m.error.code === 'http' ? Object.assign(new GemmaError({ code: 'invalid_argument', message: m.error.message }), { status: m.error.status, body: m.error.body })
                                                   : new GemmaError(m.error))
                : p.resolve(m.ok);
      }
    };
    const onError = (e) => {
      for (const p of this.pending.values()) {
        p.reject(new GemmaError({ code: 'internal', message: `worker failed: ${e?.message ?? e}` }));
      }
      this.pending.clear();
    };
    if (nodeWorker) {
      worker.on('message', onMessage);
      worker.on('error', onError);
    } else {
      worker.addEventListener('message', (e) => onMessage(e.data));
      worker.addEventListener('error', onError);
    }
  }
  call(type, fields = {}, onEvent) {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onEvent });
      this.worker.postMessage({ id, type, ...fields });
    });
  }
  terminate() { this.worker.terminate(); }
}

// The request body of an input: text (a prompt), token ids, messages, or {messages, tools}.
function inputBody(input, options) {
  if (typeof input === 'string') return { prompt: input };
  if (Array.isArray(input) && input.every((x) => Number.isInteger(x))) return { prompt: input };
  if (Array.isArray(input)) return { messages: input };
  if (input && typeof input === 'object') {
    const body = {};
    if (input.messages) body.messages = input.messages;
    if (input.prompt !== undefined) body.prompt = input.prompt;
    if (input.tools) body.tools = input.tools;
    if (input.thinking !== undefined) {
      body.chat_template_kwargs = { ...(options.chat_template_kwargs ?? {}), enable_thinking: !!input.thinking };
    }
    return body;
  }
  throw new GemmaError({ code: 'invalid_argument', message: 'input must be text, token ids, messages or {messages, tools}' });
}

export class Session {
  constructor(engine) {
    this.engine = engine;
    this.ready = engine.channel.call('newSession', { engine: engine.handle });  // the worker's id
    this.busy = null;
  }

  // Resolves with the result; rejects with GemmaError. options.signal (AbortSignal) cancels as
  // the C++ API does (GemmaError "cancelled"; the session stays usable). options.onToken({id,
  // index, delta, logprob}) may return a promise: at most `window` (16) tokens run ahead of it.
  // Both need a SharedArrayBuffer (Node; a cross-origin isolated page). Without one, an abort
  // rejects at once but the worker finishes the generation before its next call.
  async generate(input, options = {}) {
    if (this.busy) throw new GemmaError({ code: 'busy', message: 'the session is already generating' });
    const { signal, onToken, window: win = 16, ...fields } = options;
    const body = inputBody(input, fields);
    if (body.chat_template_kwargs) fields.chat_template_kwargs = body.chat_template_kwargs;
    delete body.chat_template_kwargs;
    if (signal?.aborted) throw new GemmaError({ code: 'cancelled', message: 'aborted before it started' });
    const shared = typeof SharedArrayBuffer === 'function' && (isNode || globalThis.crossOriginIsolated);
    const control = shared ? new SharedArrayBuffer(8) : null;
    const ctl = control ? new Int32Array(control) : null;
    const abort = () => { if (ctl) { Atomics.store(ctl, 0, 1); Atomics.notify(ctl, 1); } };
    signal?.addEventListener('abort', abort);
    let chain = Promise.resolve();
    const events = (m) => {
      const t = { id: m.token, index: m.index, delta: m.delta, logprob: m.logprob };
      chain = chain.then(() => onToken?.(t)).catch(() => abort()).then(() => {
        if (ctl) { Atomics.add(ctl, 1, 1); Atomics.notify(ctl, 1); }
      });
    };
    const session = await this.ready;
    this.busy = this.engine.channel.call('generate', { session, input: body, options: fields, control, window: win }, events);
    try {
      let r;
      if (shared || !signal) {
        r = await this.busy;
      } else {
        const aborted = new Promise((_, reject) => signal.addEventListener('abort', () => reject(
            new GemmaError({ code: 'cancelled', message: 'cancelled (the worker finishes the generation in the background)' }))));
        r = await Promise.race([this.busy, aborted]);
      }
      await chain;
      return r;
    } finally {
      this.busy = null;
      signal?.removeEventListener('abort', abort);
    }
  }

  // log p(token | prefix) at every position, and the logits when asked ([positions][vocab]).
  async score(ids, { logits = false } = {}) {
    return this.engine.channel.call('score', { session: await this.ready, ids, logits });
  }
  // The HTTP server's /v1/chat/completions (chat) or /v1/completions body, answered on this
  // session by the same code: the response body, or with "stream": true the SSE text through
  // onEvent(text) as it comes. A refused request rejects with a GemmaError carrying the HTTP
  // `status` and the server's error `body`. signal cancels (as a dropped connection does).
  async openai(chat, body, { signal, onEvent } = {}) {
    const shared = typeof SharedArrayBuffer === 'function' && (isNode || globalThis.crossOriginIsolated);
    const control = shared ? new SharedArrayBuffer(8) : null;
    const abort = () => { if (control) Atomics.store(new Int32Array(control), 0, 1); };
    signal?.addEventListener('abort', abort);
    try {
      return await this.engine.channel.call('openai', { session: await this.ready, chat, body, control },
                                            (m) => onEvent?.(m.text));
    } finally {
      signal?.removeEventListener('abort', abort);
    }
  }
  async reset() { return this.engine.channel.call('reset', { session: await this.ready }); }
  async destroy() { return this.engine.channel.call('destroySession', { session: await this.ready }); }
}

export class Engine {
  constructor(channel, info) {
    this.channel = channel;
    this.info = info;
    this.handle = info.handle;
  }
  newSession() { return new Session(this); }
  tokenize(text) { return this.channel.call('tokenize', { engine: this.handle, text }); }
  detokenize(ids) { return this.channel.call('detokenize', { engine: this.handle, ids }); }
  // The rendered prompt text and its ids for an input, as generate evaluates it.
  prompt(input, options = {}) {
    const body = inputBody(input, options);
    return this.channel.call('prompt', { engine: this.handle, input: body });
  }
  // The HTTP server's /props for this engine.
  props() { return this.channel.call('props', { engine: this.handle }); }
  conformance(request) { return this.channel.call('conformance', { request }); }
  // Tests and reliability runs: destroys the WebGPU device, as a lost GPU would be (the next request
  // fails with code "device"; the one after it rebuilds the device and continues the conversation).
  loseDevice() { return this.channel.call('loseDevice', {}); }
  async destroy() {
    await this.channel.call('destroy', { engine: this.handle });
    this.channel.terminate();
  }
}

// name: the model's name in OpenAI bodies (Session.openai). model: a directory path (Node), File
// objects (a user's pick, or the cache's: model-cache.mjs; read in slices, never whole), or
// {url, files?, optional?} (fetched: config.json, model.safetensors, tokenizer.json, and
// generation_config.json, chat_template.jinja when present). backend: "webgpu" | "cpu" | "cpu-ref" |
// "auto" (WebGPU where the page has it, else the CPU; engine.info.backend and .device say which).
// webgpu: {kernels} ("auto" | "workgroup" | "rows": the WebGPU kernel family), {subgroups} (false:
// the workgroup kernels reduce without subgroup operations even where the adapter has them),
// {matvecWorkgroups} (an integer >= 0: the decode matvecs' workgroups, each looping over row blocks;
// 0 a workgroup per block; the default is the backend's measured one) and, Node only,
// {module, flags}: Dawn for Node's npm package `webgpu` and its create() flags (e.g.
// ["backend=vulkan"]); {rejectSubgroupShaders: true} (tests) makes the shader compiler refuse the
// subgroup kernels, as some drivers' would: the engine then takes the workgroup reductions and
// engine.info.device says "subgroups refused"; {rejectKernels: "regex"} (tests) refuses the kernels
// whose names match it (a refused prompt-chunk kernel leaves its chunks to the general kernels).
// onProgress({file, loaded, total}) while fetching. threads: > 1
// runs the pthreads build (gemma-engine-mt.js beside the module) where SharedArrayBuffer works
// (Node, a cross-origin isolated page), else one thread; engine.info.threads says which.
export async function loadEngine({ model, name, backend = 'auto', context = 4096, threads = 1, onProgress, webgpu,
                                   moduleUrl = new URL('../gemma-engine.js', import.meta.url).href,
                                   wasmUrl } = {}) {
  if (!['webgpu', 'cpu', 'cpu-ref', 'auto'].includes(backend)) {
    throw new GemmaError({ code: 'unsupported', message: `backend '${backend}' is not in the WebAssembly build (webgpu, cpu, cpu-ref, auto)` });
  }
  if (webgpu?.kernels !== undefined && !['auto', 'workgroup', 'rows'].includes(webgpu.kernels)) {
    throw new GemmaError({ code: 'invalid_argument', message: `webgpu.kernels '${webgpu.kernels}' is not one of auto, workgroup, rows` });
  }
  if (webgpu?.subgroups !== undefined && typeof webgpu.subgroups !== 'boolean') {
    throw new GemmaError({ code: 'invalid_argument', message: `webgpu.subgroups must be true or false, not ${JSON.stringify(webgpu.subgroups)}` });
  }
  if (webgpu?.matvecWorkgroups !== undefined &&
      !(Number.isInteger(webgpu.matvecWorkgroups) && webgpu.matvecWorkgroups >= 0 && webgpu.matvecWorkgroups <= 1 << 24)) {
    throw new GemmaError({ code: 'invalid_argument',
                           message: `webgpu.matvecWorkgroups must be an integer from 0 to 16777216, not ${JSON.stringify(webgpu.matvecWorkgroups)}` });
  }
  wasmUrl ??= new URL('gemma-engine.wasm', moduleUrl).href;
  const workerUrl = new URL('./worker.mjs', import.meta.url);
  let channel;
  if (isNode) {
    const { Worker } = await import('node:worker_threads');
    channel = new Channel(new Worker(workerUrl), true);
  } else {
    channel = new Channel(new Worker(workerUrl, { type: 'module' }), false);
  }
  try {
    const info = await channel.call('load', { model, name, backend, context, threads, moduleUrl, wasmUrl, webgpu },
                                    (p) => onProgress?.(p));
    return new Engine(channel, info);
  } catch (e) {
    channel.terminate();
    throw e;
  }
}
