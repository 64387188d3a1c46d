// Headless Chromium (Debian's `chromium`) drives the web console of a running `gemma-engine serve`
// through the DevTools protocol: send a prompt and watch it stream, stop mid-stream, toggle
// thinking, a schema-constrained request, a tool call answered and continued, editing an earlier
// turn, a phone-sized window, and no request leaving the server's origin. Screenshots go to OUTDIR.
// Closes with "N passed, N failed"; exit status 1 when a check failed.
//
//   node --experimental-websocket tests/server/console_browser.mjs BASE_URL OUTDIR
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { openChromium } from '../../web/test/chromium.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(path.join(root, '.cache/npm-assets/package.json'));
const Ajv = require('ajv');
const [base, outDir] = process.argv.slice(2);
fs.mkdirSync(outDir, { recursive: true });
const origin = new URL(base).origin;

// ------------------------------------------------------------------ browser and protocol
const requests = [];
const { cdp, js, close } = await openChromium({
  prefix: 'gemma-console-',
  args: ['--window-size=1280,860'],
  onEvent: (msg) => {
    if (msg.method === 'Network.requestWillBeSent') requests.push(msg.params.request.url);
  },
});
async function waitFor(expression, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await js(expression);
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + expression);
    await new Promise((r) => setTimeout(r, 40));
  }
}
async function shot(name) {
  const r = await cdp('Page.captureScreenshot', { format: 'png' });
  fs.writeFileSync(path.join(outDir, name + '.png'), Buffer.from(r.data, 'base64'));
}
async function key(k, code, keyCode) {
  for (const type of ['keyDown', 'keyUp']) {
    await cdp('Input.dispatchKeyEvent',
              { type, key: k, code, windowsVirtualKeyCode: keyCode, text: type === 'keyDown' && k === 'Enter' ? '\r' : undefined });
  }
}
// Types into the focused prompt and presses Enter, as a person would.
async function typeAndSend(text) {
  await js(`document.getElementById('prompt').focus()`);
  await cdp('Input.insertText', { text });
  await key('Enter', 'Enter', 13);
}
const idle = () => waitFor(`document.getElementById('stop').disabled && !document.querySelector('.streaming')`, 60000);
const set = (id, v) => js(`(() => { const e = document.getElementById(${JSON.stringify(id)});
  e.value = ${JSON.stringify(String(v))}; e.dispatchEvent(new Event('change')); })()`);
const lastAssistant = () => js(`(() => { const m = [...document.querySelectorAll('.msg.assistant')].pop();
  return m ? m.querySelector('.content').textContent : null; })()`);
async function metric(name) {
  const text = await (await fetch(new URL('/metrics', base))).text();
  return Number(text.split('\n').find((l) => l.startsWith(name + ' ')).split(' ')[1]);
}

let passed = 0, failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
    await shot('failed-' + name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()).catch(() => {});
  }
}

await cdp('Network.enable');
await cdp('Page.enable');
await cdp('Page.navigate', { url: base });
await waitFor(`document.readyState === 'complete'`);
// Record what the page asks of the server.
await js(`(() => { const f = window.fetch; window.__bodies = [];
  window.fetch = (u, o) => { if (o && o.body) window.__bodies.push(JSON.parse(o.body)); return f(u, o); }; })()`);

await check('shows the model and backend', async () => {
  const info = await waitFor(`(t => t.includes('slot') && t)(document.getElementById('model-info').textContent)`);
  assert.match(info, /tiny · cpu/);
  await shot('console-start');
});

await check('a prompt streams tokens into the answer, with telemetry', async () => {
  await set('temperature', 0);
  await set('max_tokens', 40);
  await typeAndSend('Hello there');
  // Seen while streaming: the text grows and the cursor class is on.
  const first = await waitFor(`(() => { const c = document.querySelector('.msg.assistant .content.streaming');
    return c && c.textContent.length > 0 && c.textContent.length; })()`);
  await waitFor(`(() => { const c = document.querySelector('.msg.assistant .content');
    return c && c.textContent.length > ${first}; })()`);
  await idle();
  assert.ok((await lastAssistant()).length > 0);
  assert.match(await js(`document.getElementById('t-ttft').textContent`), /ms$/);
  assert.ok(Number(await js(`document.getElementById('t-tokens').textContent`)) > 0);
  assert.ok(Number(await js(`document.getElementById('t-prompt').textContent`)) > 0);
  await shot('console-chat');
});

await check('Stop (and Esc) cancels mid-stream; the server cancels too', async () => {
  const before = await metric('gemma_cancelled_total');
  await set('max_tokens', 600);
  await js(`document.getElementById('ignore_eos').checked = true`);
  await typeAndSend('Tell me a very long story');
  await waitFor(`(() => { const c = document.querySelector('.msg.assistant:last-child .content.streaming');
    return c && c.textContent.length > 0; })()`);
  await js(`document.getElementById('stop').click()`);
  await idle();
  assert.ok(await js(`document.querySelector('.msg.assistant:last-child').textContent.includes('(stopped)')`));
  assert.equal(await js(`document.getElementById('t-finish').textContent`), 'stopped');
  const end = Date.now() + 10000;
  while ((await metric('gemma_cancelled_total')) === before && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(await metric('gemma_cancelled_total'), before + 1);
  // Esc does the same from the keyboard.
  await typeAndSend('Another long one');
  await waitFor(`!!document.querySelector('.content.streaming')`);
  await key('Escape', 'Escape', 27);
  await idle();
  await js(`document.getElementById('ignore_eos').checked = false`);
  await shot('console-stopped');
});

await check('the thinking toggle reaches the request and the rendered prompt', async () => {
  await js(`document.getElementById('clear').click()`);
  await set('max_tokens', 4);
  await typeAndSend('Think about it');
  await idle();
  const plain = Number(await js(`document.getElementById('t-prompt').textContent`));
  await js(`document.getElementById('clear').click()`);
  await js(`document.getElementById('think').click()`);
  await typeAndSend('Think about it');
  await idle();
  const body = await js(`window.__bodies[window.__bodies.length - 1]`);
  assert.equal(body.chat_template_kwargs.enable_thinking, true);
  assert.ok(Number(await js(`document.getElementById('t-prompt').textContent`)) > plain);
  await js(`document.getElementById('think').click()`);
});

await check('the JSON Schema example gives output that validates (AJV)', async () => {
  await js(`document.getElementById('clear').click()`);
  await set('examples', 'schema');
  await set('max_tokens', 120);
  await set('seed', 7);
  await key('Enter', 'Enter', 13);
  await idle();
  const schema = JSON.parse(await js(`document.getElementById('schema').value`));
  const text = await lastAssistant();
  const validate = new Ajv({ strict: false }).compile(schema);
  assert.ok(validate(JSON.parse(text)), text + ' ' + JSON.stringify(validate.errors));
  const body = await js(`window.__bodies[window.__bodies.length - 1]`);
  assert.equal(body.response_format.type, 'json_schema');
  await shot('console-schema');
});

await check('a tool call is shown as a call, answered, and the chat continues', async () => {
  await js(`document.getElementById('clear').click()`);
  await set('examples', 'tool');
  await set('max_tokens', 60);
  // The example's declaration with a closed set of cities, so the tiny random model ends its call.
  await js(`(() => { const t = JSON.parse(document.getElementById('tools').value);
    t[0].function.parameters.properties.city = { type: 'string', enum: ['Paris', 'Oslo'] };
    document.getElementById('tools').value = JSON.stringify(t); })()`);
  await key('Enter', 'Enter', 13);
  await idle();
  const call = await waitFor(`document.querySelector('.call-name')?.textContent`);
  assert.match(call, /^get_weather\(\{/);
  await set('tool_choice', 'none');
  await set('max_tokens', 6);
  // The model may make several calls: each gets its result; the chat goes on after the last.
  const calls = await js(`document.querySelectorAll('.call').length`);
  for (let k = 0; k < calls; k++) {
    await js(`document.querySelector('.tool-result').value = '{"temp_c": 21}'`);
    await js(`document.querySelector('.call form button').click()`);
  }
  await waitFor(`document.querySelectorAll('.msg.assistant').length === 2`);
  await idle();
  const roles = await js(`[...document.querySelectorAll('.msg')].map((m) => m.className.split(' ')[1])`);
  assert.deepEqual(roles, ['user', 'assistant', ...Array(calls).fill('tool'), 'assistant']);
  const body = await js(`window.__bodies[window.__bodies.length - 1]`);
  assert.equal(body.messages[2].role, 'tool');
  assert.equal(body.messages[2].tool_call_id, body.messages[1].tool_calls[0].id);
  await shot('console-tool');
  await set('constraint', 'none');
});

await check('speculative decoding: the choice reaches the request, drafts show in the telemetry', async () => {
  // This server has no draft model: that choice is disabled.
  assert.equal(await js(`document.getElementById('spec-draft-model').disabled`), true);
  await js(`document.getElementById('clear').click()`);
  await set('temperature', 0);
  await set('max_tokens', 24);
  await set('speculative', 'off');
  await typeAndSend('the cat sat on the mat, the cat sat on the mat, the cat sat on the');
  await idle();
  const plain = await lastAssistant();
  assert.equal(await js(`document.getElementById('t-drafts').textContent`), '–');
  await js(`document.getElementById('clear').click()`);
  await set('speculative', 'prompt_lookup');
  await set('max_draft', 3);
  await typeAndSend('the cat sat on the mat, the cat sat on the mat, the cat sat on the');
  await idle();
  const body = await js(`window.__bodies[window.__bodies.length - 1]`);
  assert.deepEqual(body.speculative, { mode: 'prompt_lookup', max_draft: 3 });
  assert.equal(await lastAssistant(), plain);  // greedy: the same text
  // (kept / drafted; this random tiny model rarely repeats a token of the prompt, so there may be
  // no draft to show: server_test's SpeculativeDecodingWithADraftModel checks the counts)
  assert.match(await js(`document.getElementById('t-drafts').textContent`), /^(–|\d+ \/ \d+)$/);
  await set('speculative', '');
});

await check('editing an earlier user turn drops the later turns and regenerates', async () => {
  await js(`document.getElementById('clear').click()`);
  await set('max_tokens', 4);
  await typeAndSend('First question');
  await idle();
  await typeAndSend('Second question');
  await idle();
  assert.equal(await js(`document.querySelectorAll('.msg').length`), 4);
  await js(`document.querySelector('.msg.user .edit-btn').click()`);
  await waitFor(`!!document.querySelector('.edit-text')`);
  await js(`document.querySelector('.edit-text').value = 'Edited question'`);
  await js(`document.querySelector('.msg.user form button').click()`);
  await idle();
  const roles = await js(`[...document.querySelectorAll('.msg')].map((m) => m.className.split(' ')[1])`);
  assert.deepEqual(roles, ['user', 'assistant']);
  const body = await js(`window.__bodies[window.__bodies.length - 1]`);
  assert.deepEqual(body.messages, [{ role: 'user', content: 'Edited question' }]);
  await shot('console-edited');
});

await check('attached images and audio go with the message as content parts', async () => {
  await js(`document.getElementById('clear').click()`);
  assert.equal(await js(`document.getElementById('attach-label').hidden`), false);
  assert.equal(await js(`document.getElementById('attach').accept`), 'image/*,audio/*');
  await set('temperature', 0);
  await set('max_tokens', 4);
  await typeAndSend('What is in it?');
  await idle();
  const plain = Number(await js(`document.getElementById('t-prompt').textContent`));
  await js(`document.getElementById('clear').click()`);
  const attach = async (...files) => {
    const { root: doc } = await cdp('DOM.getDocument');
    const { nodeId } = await cdp('DOM.querySelector', { nodeId: doc.nodeId, selector: '#attach' });
    await cdp('DOM.setFileInputFiles', { nodeId, files });
  };
  const image = path.join(root, 'tests/goldens/vision/images/small_64x48.png');
  const clip = path.join(root, 'tests/goldens/audio/clips/speech.wav');
  const text = path.join(root, 'README.md');
  await attach(image, text, clip, image);
  await waitFor(`document.querySelectorAll('#attachments figure').length === 3`);
  // A file that is neither image nor audio is refused with a message; an attachment can be removed.
  assert.ok(await js(`[...document.querySelectorAll('.msg.error')].some((e) => e.textContent.includes('README.md: not an image or audio file'))`));
  await js(`document.querySelectorAll('#attachments .remove')[2].click()`);
  await waitFor(`document.querySelectorAll('#attachments figure').length === 2`);
  await shot('console-attachments');
  await typeAndSend('What is in it?');
  await idle();
  assert.equal(await js(`document.getElementById('attachments').hidden`), true);
  const body = await js(`window.__bodies[window.__bodies.length - 1]`);
  const parts = body.messages[0].content;
  assert.deepEqual(parts.map((p) => p.type), ['image_url', 'input_audio', 'text']);
  assert.equal(parts[0].image_url.url,
               'data:image/png;base64,' + fs.readFileSync(image).toString('base64'));
  assert.equal(parts[1].input_audio.data, fs.readFileSync(clip).toString('base64'));
  assert.equal(parts[2].text, 'What is in it?');
  // The image's and the clip's soft tokens are in the prompt; the answer came.
  const prompt = Number(await js(`document.getElementById('t-prompt').textContent`));
  assert.ok(prompt > plain + 20, `prompt ${prompt} tokens, the text alone ${plain}`);
  assert.ok((await lastAssistant()) !== null);
  assert.ok(await js(`document.querySelector('.msg.user .media img').naturalWidth === 64`));
  assert.ok(await js(`!!document.querySelector('.msg.user .media audio')`));
  await shot('console-media');
  // Editing the turn keeps its attachments.
  await js(`document.querySelector('.msg.user .edit-btn').click()`);
  await waitFor(`!!document.querySelector('.edit-text')`);
  await js(`document.querySelector('.edit-text').value = 'Describe it.'`);
  await js(`document.querySelector('.msg.user form button').click()`);
  await idle();
  const edited = await js(`window.__bodies[window.__bodies.length - 1]`);
  assert.deepEqual(edited.messages[0].content.map((p) => p.type), ['image_url', 'input_audio', 'text']);
  assert.equal(edited.messages[0].content[2].text, 'Describe it.');
  await js(`document.getElementById('clear').click()`);
});

await check('fits a phone-sized window', async () => {
  await cdp('Emulation.setDeviceMetricsOverride', { width: 390, height: 844, deviceScaleFactor: 2, mobile: true });
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(await js(`document.documentElement.scrollWidth <= 390`));
  assert.ok(await js(`getComputedStyle(document.getElementById('toggle-controls')).display !== 'none'`));
  await shot('console-phone');
  await js(`document.getElementById('toggle-controls').click()`);
  assert.ok(await js(`getComputedStyle(document.getElementById('controls')).display !== 'none'`));
  await shot('console-phone-controls');
  await cdp('Emulation.clearDeviceMetricsOverride');
});

await check('no request leaves the server origin', async () => {
  assert.ok(requests.length > 5);
  const foreign = requests.filter((u) => !u.startsWith(origin) && !u.startsWith('data:') && u !== 'about:blank');
  assert.deepEqual(foreign, []);
});

console.log(`${passed} passed, ${failed} failed`);
await close();
process.exit(failed ? 1 : 0);
