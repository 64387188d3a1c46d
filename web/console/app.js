// gemma-engine console: a chat over the OpenAI API of `gemma-engine serve` (same origin, no other
// requests), or, in the WebAssembly build's static files, over the same API answered in the page
// by the engine in a worker (engine-transport.mjs): one code base, two transports. The page asks
// for `props`; when no server answers it, it loads the in-page transport.

const $ = (id) => document.getElementById(id);
const state = {
  turns: [],        // {role, content, reasoning?, tool_calls?, tool_call_id?, logprobs?, stopped?}
  busy: false,
  abort: null,
  editing: -1,      // index of the user turn being edited
  attachments: [],  // {kind: 'image' | 'audio', name, url (a data URL)} for the next user turn
  modalities: { image: false, audio: false },  // what the model takes besides text (/props)
};

// ---------------------------------------------------------------- transport

// fetch(path, init) for the API's paths, relative to the page (the console works under any path).
let transport = { kind: 'http', fetch: (path, init) => fetch(path, init) };

async function chooseTransport() {
  try {
    const res = await fetch('props', { headers: headers() });
    if (res.status !== 404 && (res.headers.get('content-type') || '').includes('json')) return;
  } catch (e) { /* no server */ }
  try {
    const { engineTransport } = await import('./engine-transport.mjs');
    transport = await engineTransport({ onReady: loadInfo });
  } catch (e) {
    $('model-info').textContent = 'no server, and no in-page engine: ' + e.message;
  }
}

// ---------------------------------------------------------------- server

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api_key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

async function errorText(res) {
  try {
    const j = await res.json();
    if (j.error) return `${res.status} ${j.error.type}: ${j.error.message}`;
  } catch (e) { /* not JSON */ }
  return `HTTP ${res.status}`;
}

async function loadInfo() {
  try {
    const res = await transport.fetch('props', { headers: headers() });
    if (!res.ok) throw new Error(await errorText(res));
    const p = await res.json();
    $('model-info').textContent =
        `${p.model} · ${p.backend}${p.device ? ` (${p.device})` : ''} · context ${p.context} · ` +
        (transport.kind === 'engine' ? 'in this page' : `${p.slots} slot(s)`) +
        (p.has_tokenizer ? '' : ' · no tokenizer');
    $('server-props').textContent = JSON.stringify(p, null, 2);
    // Speculative decoding with a draft model only where the server loaded one.
    $('spec-draft-model').disabled = !p.draft_model;
    if (!p.draft_model && $('speculative').value === 'draft_model') $('speculative').value = '';
    showModalities(p.modalities || {});
  } catch (e) {
    $('model-info').textContent = 'server: ' + e.message;
  }
}

// ---------------------------------------------------------------- request

function num(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

function buildRequest() {
  const body = {
    messages: state.turns.map(toApiMessage),
    temperature: num('temperature'),
    top_p: num('top_p'),
    top_k: num('top_k'),
    min_p: num('min_p'),
    typical_p: num('typical_p'),
    repetition_penalty: num('repetition_penalty'),
    frequency_penalty: num('frequency_penalty'),
    presence_penalty: num('presence_penalty'),
    penalty_window: num('penalty_window'),
    max_tokens: num('max_tokens'),
    seed: num('seed'),
    chat_template_kwargs: { enable_thinking: $('think').checked },
  };
  if ($('speculative').value) {
    body.speculative = { mode: $('speculative').value, max_draft: num('max_draft') };
  }
  const stops = $('stop_strings').value.split('\n').filter((s) => s.length > 0);
  if (stops.length) body.stop = stops;
  const ids = $('stop_ids').value.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  if (ids.length) body.stop_token_ids = ids;
  if ($('logit_bias').value.trim()) body.logit_bias = JSON.parse($('logit_bias').value);
  if ($('ignore_eos').checked) body.ignore_eos = true;
  if ($('logprobs').checked) { body.logprobs = true; body.top_logprobs = 3; }
  const bestOf = num('best_of') || 1;
  if (bestOf > 1) { body.n = 1; body.best_of = bestOf; body.logprobs = true; }
  const kind = $('constraint').value;
  if (kind === 'regex') body.regex = $('regex').value;
  if (kind === 'json') body.response_format = { type: 'json_object' };
  if (kind === 'schema') {
    body.response_format = { type: 'json_schema',
                             json_schema: { name: 'console', strict: true, schema: JSON.parse($('schema').value) } };
  }
  if (kind === 'tools') {
    body.tools = JSON.parse($('tools').value);
    const choice = $('tool_choice').value.trim() || 'auto';
    body.tool_choice = ['auto', 'none', 'required'].includes(choice)
        ? choice : { type: 'function', function: { name: choice } };
  }
  for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
  return body;
}

// A user turn's attachments go first as content parts (OpenAI's shapes: image_url with a data
// URL, input_audio with base64 data), then its text.
function toApiMessage(t) {
  if (t.role === 'tool') return { role: 'tool', tool_call_id: t.tool_call_id, content: t.content };
  const m = { role: t.role, content: t.content || '' };
  if (t.media && t.media.length) {
    m.content = t.media.map((a) => (a.kind === 'image'
      ? { type: 'image_url', image_url: { url: a.url } }
      : { type: 'input_audio', input_audio: { data: a.url.slice(a.url.indexOf(',') + 1), format: a.format } }));
    if (t.content) m.content.push({ type: 'text', text: t.content });
  }
  if (t.tool_calls && t.tool_calls.length) m.tool_calls = t.tool_calls;
  return m;
}

// ---------------------------------------------------------------- generation

async function generate() {
  let body;
  try {
    body = buildRequest();
  } catch (e) {
    showError('bad control value: ' + e.message);
    return;
  }
  const turn = { role: 'assistant', content: '', reasoning: '', tool_calls: [], streaming: true };
  state.turns.push(turn);
  setBusy(true);
  render();
  const t0 = performance.now();
  const arrivals = [];
  const stream = !body.best_of;
  body.stream = stream;
  if (stream) body.stream_options = { include_usage: true };
  state.abort = new AbortController();
  let timings = null, usage = null;
  try {
    const res = await transport.fetch('v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: state.abort.signal });
    if (!res.ok) throw new Error(await errorText(res));
    if (!stream) {
      const j = await res.json();
      const c = j.choices[0];
      turn.content = c.message.content || '';
      turn.reasoning = c.message.reasoning_content || '';
      turn.tool_calls = c.message.tool_calls || [];
      turn.finish = c.finish_reason;
      turn.logprobs = c.logprobs && c.logprobs.content;
      timings = j.timings; usage = j.usage;
      arrivals.push(performance.now());
    } else {
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          if (!event.startsWith('data: ')) continue;
          const data = event.slice(6);
          if (data === '[DONE]') continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(`${j.error.type}: ${j.error.message}`);
          if (j.usage) usage = j.usage;
          if (j.timings) timings = j.timings;
          for (const c of j.choices || []) {
            const d = c.delta || {};
            if (d.content) { turn.content += d.content; arrivals.push(performance.now()); }
            if (d.reasoning_content) { turn.reasoning += d.reasoning_content; arrivals.push(performance.now()); }
            if (d.tool_calls) turn.tool_calls.push(...d.tool_calls.map(({ index, ...rest }) => rest));
            if (c.finish_reason) turn.finish = c.finish_reason;
            if (c.logprobs && c.logprobs.content) turn.logprobs = c.logprobs.content;
          }
          renderStreaming(turn);
        }
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') {
      turn.stopped = true;
      turn.finish = 'stopped';
    } else {
      state.turns.pop();
      showError(e.message);
    }
  }
  turn.streaming = false;
  state.abort = null;
  setBusy(false);
  showTelemetry(t0, arrivals, timings, usage, turn);
  render();
}

function stop() {
  if (state.abort) state.abort.abort();
}

function setBusy(b) {
  state.busy = b;
  $('send').disabled = b;
  $('regenerate').disabled = b;
  $('stop').disabled = !b;
}

function percentile(v, p) {
  if (!v.length) return 0;
  const s = [...v].sort((a, b) => a - b);
  const i = p * (s.length - 1), lo = Math.floor(i), hi = Math.min(s.length - 1, lo + 1);
  return s[lo] + (s[hi] - s[lo]) * (i - lo);
}

function showTelemetry(t0, arrivals, timings, usage, turn) {
  const gaps = arrivals.slice(1).map((t, i) => t - arrivals[i]);
  const ms = (v) => (v === undefined || v === null ? '–' : `${v.toFixed(1)} ms`);
  if (timings) {
    $('t-prompt').textContent = timings.cache_n + timings.prompt_n;
    $('t-reused').textContent = timings.cache_n;
    $('t-ttft').textContent = ms(timings.ttft_ms);
    $('t-tps').textContent = timings.predicted_per_second.toFixed(1);
    $('t-p50').textContent = ms(timings.itl_median_ms);
    $('t-p95').textContent = ms(timings.itl_p95_ms);
    $('t-tokens').textContent = timings.predicted_n;
    $('t-drafts').textContent =
        timings.draft_n !== undefined ? `${timings.draft_n_accepted} / ${timings.draft_n}` : '–';
  } else {
    // Stopped before the server's summary: what this page measured.
    $('t-ttft').textContent = arrivals.length ? ms(arrivals[0] - t0) : '–';
    $('t-p50').textContent = gaps.length ? ms(percentile(gaps, 0.5)) : '–';
    $('t-p95').textContent = gaps.length ? ms(percentile(gaps, 0.95)) : '–';
    $('t-tokens').textContent = arrivals.length;
    $('t-drafts').textContent = '–';
    $('t-tps').textContent = gaps.length ? (1000 / (gaps.reduce((a, b) => a + b, 0) / gaps.length)).toFixed(1) : '–';
  }
  if (usage) $('t-prompt').textContent = usage.prompt_tokens;
  $('t-finish').textContent = turn.finish || '–';
}

// ---------------------------------------------------------------- rendering

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function render() {
  const box = $('messages');
  box.replaceChildren();
  state.turns.forEach((t, i) => box.appendChild(renderTurn(t, i)));
  box.scrollTop = box.scrollHeight;
}

function renderStreaming(turn) {
  const box = $('messages');
  const last = box.lastElementChild;
  const fresh = renderTurn(turn, state.turns.length - 1);
  if (last) box.replaceChild(fresh, last); else box.appendChild(fresh);
  box.scrollTop = box.scrollHeight;
}

function renderTurn(t, i) {
  const m = el('div', `msg ${t.role}`);
  m.dataset.index = i;
  const role = el('div', 'role', t.role === 'tool' ? `tool result (${t.name || t.tool_call_id})` : t.role);
  m.appendChild(role);
  if (t.role === 'user') {
    if (state.editing === i) {
      const f = el('form', 'edit');
      const ta = el('textarea');
      ta.value = t.content;
      ta.rows = 3;
      ta.className = 'edit-text';
      const save = el('button', '', 'Save & regenerate');
      const cancel = el('button', 'ghost', 'Cancel');
      cancel.type = 'button';
      cancel.onclick = () => { state.editing = -1; render(); };
      f.onsubmit = (e) => { e.preventDefault(); commitEdit(i, ta.value); };
      ta.onkeydown = (e) => {
        if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); commitEdit(i, ta.value); }
        if (e.key === 'Escape') { state.editing = -1; render(); }
      };
      if (t.media && t.media.length) f.appendChild(renderMedia(t.media));
      f.append(ta, save, cancel);
      m.appendChild(f);
      setTimeout(() => ta.focus(), 0);
      return m;
    }
    const edit = el('button', 'ghost edit-btn', 'Edit');
    edit.title = 'Edit this turn (later turns are discarded)';
    edit.disabled = state.busy;
    edit.onclick = () => { state.editing = i; render(); };
    role.appendChild(edit);
  }
  if (t.media && t.media.length) m.appendChild(renderMedia(t.media));
  if (t.reasoning) {
    const d = el('details', 'reasoning');
    d.open = !!t.streaming;
    d.appendChild(el('summary', '', t.streaming && !t.content ? 'Thinking…' : 'Reasoning'));
    d.appendChild(el('div', 'reasoning-text', t.reasoning));
    m.appendChild(d);
  }
  const content = el('div', 'content' + (t.streaming ? ' streaming' : ''), t.content || '');
  m.appendChild(content);
  for (const call of t.tool_calls || []) m.appendChild(renderCall(call, i));
  if (t.logprobs && t.logprobs.length) {
    const lp = el('div', 'logprobs');
    for (const x of t.logprobs) {
      const s = el('span', '', x.token);
      s.title = `${x.logprob.toFixed(3)}\n` +
          (x.top_logprobs || []).map((a) => `${JSON.stringify(a.token)} ${a.logprob.toFixed(3)}`).join('\n');
      lp.appendChild(s);
    }
    m.appendChild(lp);
  }
  if (t.stopped) m.appendChild(el('div', 'role', '(stopped)'));
  return m;
}

// Thumbnails of images, players for audio; with remove(i), each has a remove button.
function renderMedia(media, remove) {
  const box = el('div', 'media');
  media.forEach((a, i) => {
    const item = el('figure', 'attachment');
    item.title = a.name;
    if (a.kind === 'image') {
      const img = el('img');
      img.src = a.url;
      img.alt = a.name;
      item.appendChild(img);
    } else {
      const audio = el('audio');
      audio.controls = true;
      audio.src = a.url;
      item.appendChild(audio);
    }
    const caption = el('figcaption', '', a.name);
    if (remove) {
      const x = el('button', 'ghost remove', '×');
      x.type = 'button';
      x.title = 'Remove ' + a.name;
      x.setAttribute('aria-label', 'Remove ' + a.name);
      x.onclick = () => remove(i);
      caption.appendChild(x);
    }
    item.appendChild(caption);
    box.appendChild(item);
  });
  return box;
}

function renderAttachments() {
  const box = $('attachments');
  box.hidden = state.attachments.length === 0;
  box.replaceChildren(renderMedia(state.attachments, (i) => {
    state.attachments.splice(i, 1);
    renderAttachments();
  }));
}

// The attach button (and paste / drop) takes what the model reads: images with a vision tower,
// audio with an audio tower.
function showModalities(m) {
  state.modalities = { image: !!m.image, audio: !!m.audio };
  const accept = [m.image && 'image/*', m.audio && 'audio/*'].filter(Boolean);
  $('attach').accept = accept.join(',');
  $('attach-label').hidden = accept.length === 0;
  if (!accept.length && state.attachments.length) {
    state.attachments = [];
    renderAttachments();
  }
}

const MAX_ATTACHMENT_BYTES = 20 << 20;

function readDataUrl(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error || new Error('cannot read ' + file.name));
    r.readAsDataURL(file);
  });
}

async function addFiles(files) {
  for (const f of files) {
    const kind = f.type.startsWith('image/') ? 'image' : f.type.startsWith('audio/') ? 'audio' : '';
    if (!kind) { showError(`${f.name}: not an image or audio file`); continue; }
    if (!state.modalities[kind]) { showError(`${f.name}: this model takes no ${kind} input`); continue; }
    if (f.size > MAX_ATTACHMENT_BYTES) { showError(`${f.name}: larger than 20 MiB`); continue; }
    try {
      const url = await readDataUrl(f);
      // input_audio's format: the file's subtype (wav, mpeg -> mp3, flac, ogg); the server reads
      // the bytes whatever it says.
      const sub = f.type.split('/')[1] || '';
      state.attachments.push({ kind, name: f.name, url,
                               format: sub === 'mpeg' ? 'mp3' : sub.replace(/^x-/, '') });
    } catch (e) {
      showError(e.message);
    }
  }
  renderAttachments();
}

function renderCall(call, turnIndex) {
  const box = el('div', 'call');
  let args = call.function.arguments;
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* as sent */ }
  box.appendChild(el('div', 'call-name', `${call.function.name}(${args})`));
  const answered = state.turns.some((t, k) => k > turnIndex && t.role === 'tool' && t.tool_call_id === call.id);
  // Answerable while only tool results follow this turn (one form per call of the turn).
  const open = state.turns.slice(turnIndex + 1).every((t) => t.role === 'tool');
  if (!answered && open && !state.busy) {
    const f = el('form');
    const ta = el('textarea');
    ta.rows = 2;
    ta.placeholder = 'Tool result (JSON or text)';
    ta.className = 'tool-result';
    const b = el('button', '', 'Send result');
    f.append(ta, b);
    f.onsubmit = (e) => {
      e.preventDefault();
      state.turns.push({ role: 'tool', tool_call_id: call.id, name: call.function.name, content: ta.value });
      const turn = state.turns[turnIndex];
      const pending = turn.tool_calls.filter((c) => !state.turns.some((t) => t.role === 'tool' && t.tool_call_id === c.id));
      if (pending.length === 0) generate(); else render();
    };
    box.appendChild(f);
  }
  return box;
}

function showError(text) {
  const m = el('div', 'msg error', text);
  $('messages').appendChild(m);
  m.scrollIntoView();
}

// ---------------------------------------------------------------- actions

function send() {
  const text = $('prompt').value;
  if (state.busy || (!text.trim() && !state.attachments.length)) return;
  const turn = { role: 'user', content: text };
  if (state.attachments.length) turn.media = state.attachments;
  state.turns.push(turn);
  state.attachments = [];
  renderAttachments();
  $('prompt').value = '';
  generate();
}

// (The turn keeps its attachments.)
function commitEdit(i, text) {
  const media = state.turns[i].media;
  if (!text.trim() && !media) return;
  state.turns = state.turns.slice(0, i + 1);
  state.turns[i] = media ? { role: 'user', content: text, media } : { role: 'user', content: text };
  state.editing = -1;
  generate();
}

function regenerate() {
  if (state.busy) return;
  while (state.turns.length && state.turns[state.turns.length - 1].role === 'assistant') state.turns.pop();
  if (state.turns.length) generate();
}

const EXAMPLES = {
  greedy: { prompt: 'Write a haiku about the sea.', controls: { temperature: 0 } },
  sampling: { prompt: 'Invent a name for a coffee shop.',
              controls: { temperature: 0.9, top_p: 0.95, top_k: 64, seed: 42 } },
  regex: { prompt: 'Is the sky blue? Answer yes or no, then why.',
           controls: { temperature: 0.7, constraint: 'regex', regex: '(yes|no), because [a-z ]{10,60}\\.' } },
  json: { prompt: 'Describe a cat as a JSON object.', controls: { temperature: 0.7, constraint: 'json' } },
  schema: { prompt: 'Make up a person.',
            controls: { temperature: 0.7, constraint: 'schema', schema: JSON.stringify({
              type: 'object',
              properties: { name: { type: 'string', maxLength: 24 },
                            age: { type: 'integer', minimum: 0, maximum: 120 },
                            city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] } },
              required: ['name', 'age', 'city'], additionalProperties: false }, null, 2) } },
  tool: { prompt: "What's the weather in Paris?",
          controls: { temperature: 0.3, constraint: 'tools', tool_choice: 'required' } },
  reasoning: { prompt: 'I have 3 apples and eat one. How many are left?',
               controls: { temperature: 0.6 }, think: true },
};
const DEFAULTS = { temperature: 0.7, top_p: 1, top_k: 0, min_p: 0, typical_p: 1, seed: '',
                   constraint: 'none', regex: '', tool_choice: 'auto' };
const DEFAULT_TOOLS = JSON.stringify([{
  type: 'function',
  function: { name: 'get_weather', description: 'Current weather in a city',
              parameters: { type: 'object',
                            properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } },
                            required: ['city'] } },
}], null, 2);

function applyExample(name) {
  const ex = EXAMPLES[name];
  if (!ex) return;
  const c = { ...DEFAULTS, ...ex.controls };
  for (const [k, v] of Object.entries(c)) $(k).value = v;
  if (name === 'schema' && !ex.controls.schema) $('schema').value = '';
  $('think').checked = !!ex.think;
  $('prompt').value = ex.prompt;
  showConstraint();
  $('prompt').focus();
}

function showConstraint() {
  const kind = $('constraint').value;
  $('regex-box').hidden = kind !== 'regex';
  $('schema-box').hidden = kind !== 'schema';
  $('tools-box').hidden = kind !== 'tools';
}

async function init() {
  $('tools').value = DEFAULT_TOOLS;
  $('schema').value = EXAMPLES.schema.controls.schema;
  $('api_key').value = localStorage.getItem('gemma-api-key') || '';
  $('api_key').onchange = () => { localStorage.setItem('gemma-api-key', $('api_key').value); loadInfo(); };
  $('composer').onsubmit = (e) => { e.preventDefault(); send(); };
  $('prompt').onkeydown = (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  };
  $('attach').onchange = () => { addFiles([...$('attach').files]); $('attach').value = ''; };
  $('prompt').onpaste = (e) => {
    const files = [...(e.clipboardData?.files || [])];
    if (files.length) { e.preventDefault(); addFiles(files); }
  };
  $('composer').ondragover = (e) => { if (e.dataTransfer?.types.includes('Files')) e.preventDefault(); };
  $('composer').ondrop = (e) => {
    const files = [...(e.dataTransfer?.files || [])];
    if (files.length) { e.preventDefault(); addFiles(files); }
  };
  $('stop').onclick = stop;
  $('regenerate').onclick = regenerate;
  $('clear').onclick = () => {
    if (state.busy) return;
    state.turns = [];
    state.attachments = [];
    renderAttachments();
    render();
  };
  $('examples').onchange = () => { applyExample($('examples').value); $('examples').value = ''; };
  $('constraint').onchange = showConstraint;
  $('toggle-controls').onclick = () => {
    const open = $('controls').classList.toggle('open');
    $('toggle-controls').setAttribute('aria-expanded', String(open));
  };
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && state.busy) { e.preventDefault(); stop(); }
    if (e.altKey && (e.key === 'c' || e.key === 'C')) { e.preventDefault(); $('toggle-controls').click(); }
  });
  showConstraint();
  setBusy(false);
  await chooseTransport();
  loadInfo();
  $('prompt').focus();
}

init();
