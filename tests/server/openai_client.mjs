// The official `openai` npm client against a running `gemma-engine serve` (started by
// src/server/server_test.cc on the tiny synthetic model). Output: one line per check and a closing
// "N passed, N failed"; exit status 1 when any check failed.
//
//   node tests/server/openai_client.mjs BASE_URL MODEL [KEYED_BASE_URL API_KEY]
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(path.join(root, '.cache/npm-assets/package.json'));
const { default: OpenAI } = await import(require.resolve('openai'));
const Ajv = require('ajv');

const [baseURL, model, keyedURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const user = (content) => [{ role: 'user', content }];
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] },
                    unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city', 'unit'],
    },
  },
};
const timeTool = {
  type: 'function',
  function: { name: 'get_time', description: 'Current time',
              parameters: { type: 'object', properties: { tz: { type: 'string', enum: ['utc'] } },
                            required: ['tz'] } },
};

let passed = 0, failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}
async function expectStatus(status, fn, param) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
    assert.equal(e.status, status, e.message);
    assert.ok(e.error && typeof e.error.message === 'string' && e.error.message.length > 0);
    if (param !== undefined) assert.equal(e.param, param);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

await check('models.list names the served model', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [model]);
});

await check('chat: non-streaming answer, usage and timings', async () => {
  const r = await client.chat.completions.create(
      { model, messages: user('Hello'), max_tokens: 6, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 6);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  assert.equal(r.timings.predicted_n, r.usage.completion_tokens);
});

await check('chat: greedy answers repeat; a follow-up turn reuses the cached prefix', async () => {
  const a = await client.chat.completions.create(
      { model, messages: user('Tell me a story'), max_tokens: 5, temperature: 0 });
  const b = await client.chat.completions.create(
      { model, messages: user('Tell me a story'), max_tokens: 5, temperature: 0 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const c = await client.chat.completions.create({
    model, max_tokens: 3, temperature: 0,
    messages: [...user('Tell me a story'), { role: 'assistant', content: a.choices[0].message.content },
               ...user('And then?')],
  });
  assert.ok(c.usage.prompt_tokens_details.cached_tokens > a.usage.prompt_tokens / 2,
            JSON.stringify(c.usage));
});

await check('chat: streaming deltas add up to the answer, usage chunk last', async () => {
  const stream = await client.chat.completions.create({
    model, messages: user('Count'), max_tokens: 8, temperature: 0, seed: 3,
    stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  const whole = await client.chat.completions.create(
      { model, messages: user('Count'), max_tokens: 8, temperature: 0, seed: 3 });
  assert.equal(text, whole.choices[0].message.content);
  assert.ok(chunks >= 3);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

await check('chat: same seed, same sample; n choices are independent samples', async () => {
  const req = { model, messages: user('Pick'), max_tokens: 6, temperature: 1.2, top_p: 0.95,
                seed: 1234, n: 3 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1);
  assert.ok(a.usage.completion_tokens >= 3 && a.usage.completion_tokens <= 18);  // all choices
});

await check('chat: tools with tool_choice required give a structured call', async () => {
  const r = await client.chat.completions.create({
    model, messages: user('Weather in Paris?'), max_tokens: 48, temperature: 0.7, seed: 5,
    tools: [weatherTool, timeTool], tool_choice: 'required',
  });
  const ch = r.choices[0];
  assert.equal(ch.finish_reason, 'tool_calls');
  assert.ok(ch.message.tool_calls.length >= 1);
  const call = ch.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.ok(call.id.length > 0);
  assert.ok(['get_weather', 'get_time'].includes(call.function.name));
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.ok(['Paris', 'Oslo'].includes(args.city) && ['c', 'f'].includes(args.unit));
  }
  // The conversation goes on with the tool's answer.
  const next = await client.chat.completions.create({
    model, max_tokens: 4, temperature: 0,
    messages: [...user('Weather in Paris?'), ch.message,
               { role: 'tool', tool_call_id: call.id, content: '{"temp": 21}' }],
    tools: [weatherTool, timeTool], tool_choice: 'none',
  });
  assert.equal(next.choices[0].message.tool_calls, undefined);
});

await check('chat: a named tool_choice forces that function', async () => {
  const r = await client.chat.completions.create({
    model, messages: user('What time is it?'), max_tokens: 40, temperature: 0.5, seed: 9,
    tools: [weatherTool, timeTool], tool_choice: { type: 'function', function: { name: 'get_time' } },
  });
  const calls = r.choices[0].message.tool_calls;
  assert.ok(calls.length >= 1);
  assert.ok(calls.every((c) => c.function.name === 'get_time'));
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { tz: 'utc' });
});

await check('chat: response_format json_schema output validates (AJV)', async () => {
  const schema = {
    type: 'object',
    properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 9 },
                  tag: { type: 'string', enum: ['a', 'b'] } },
    required: ['ok', 'n', 'tag'], additionalProperties: false,
  };
  const r = await client.chat.completions.create({
    model, messages: user('JSON please'), max_tokens: 64, temperature: 0.8, seed: 2,
    response_format: { type: 'json_schema', json_schema: { name: 'r', strict: true, schema } },
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  const value = JSON.parse(r.choices[0].message.content);
  const validate = new Ajv({ strict: false }).compile(schema);
  assert.ok(validate(value), JSON.stringify(validate.errors));
});

await check('chat: logprobs with top_logprobs, one entry per generated token', async () => {
  const r = await client.chat.completions.create({
    model, messages: user('Hi'), max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(t.logprob >= t.top_logprobs[0].logprob - 1e-9);
    for (let k = 1; k < 3; k++) assert.ok(t.top_logprobs[k - 1].logprob >= t.top_logprobs[k].logprob);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
  }
});

await check('chat: streamed logprobs come with their tokens and add up to the whole answer\'s', async () => {
  const req = { model, messages: user('Hi there'), max_tokens: 8, temperature: 0, logprobs: true,
                top_logprobs: 2 };
  const whole = await client.chat.completions.create(req);
  // The client's own stream helper assembles the chunks' logprobs.content (openai's
  // ChatCompletionStream), as an application would read them.
  const stream = client.chat.completions.stream({ ...req, stream: true });
  let withLogprobs = 0, withText = 0;
  stream.on('chunk', (chunk) => {
    for (const ch of chunk.choices) {
      if (ch.logprobs?.content?.length) withLogprobs++;
      if (ch.delta?.content) {
        withText++;
        // A chunk that carries text carries the log-probs of the tokens that made it.
        assert.ok(ch.logprobs?.content?.length >= 1, JSON.stringify(ch));
      }
    }
  });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
  const a = final.choices[0].logprobs.content, b = whole.choices[0].logprobs.content;
  assert.equal(a.length, b.length);
  assert.ok(withText >= 2 && withLogprobs >= withText, `${withText} text, ${withLogprobs} logprobs`);
  for (let i = 0; i < a.length; i++) {
    assert.equal(a[i].token, b[i].token);
    assert.deepEqual(a[i].bytes, b[i].bytes);
    assert.ok(Math.abs(a[i].logprob - b[i].logprob) < 1e-4, `${a[i].logprob} vs ${b[i].logprob}`);
    assert.deepEqual(a[i].top_logprobs.map((t) => t.token), b[i].top_logprobs.map((t) => t.token));
  }
});

await check('chat: stop strings are honoured and not returned', async () => {
  const free = await client.chat.completions.create(
      { model, messages: user('Go'), max_tokens: 12, temperature: 0 });
  const text = free.choices[0].message.content;
  const cut = [...text].slice(3, 5).join('');
  if (cut.trim().length === 0) return;  // nothing printable to stop on
  const r = await client.chat.completions.create(
      { model, messages: user('Go'), max_tokens: 12, temperature: 0, stop: [cut] });
  assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(cut)));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

await check('chat: reasoning switches render a different prompt and are accepted', async () => {
  const off = await client.chat.completions.create(
      { model, messages: user('Think'), max_tokens: 2, temperature: 0 });
  const on = await client.chat.completions.create({
    model, messages: user('Think'), max_tokens: 2, temperature: 0,
    chat_template_kwargs: { enable_thinking: true } });
  const effort = await client.chat.completions.create(
      { model, messages: user('Think'), max_tokens: 2, temperature: 0, reasoning_effort: 'high' });
  assert.ok(on.usage.prompt_tokens > off.usage.prompt_tokens);
  assert.equal(effort.usage.prompt_tokens, on.usage.prompt_tokens);
});

await check('completions: text prompt, logprobs, streaming', async () => {
  const r = await client.completions.create(
      { model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 2 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].logprobs.tokens.length, r.usage.completion_tokens);
  assert.equal(r.choices[0].logprobs.tokens.join(''), r.choices[0].text);
  const stream = await client.completions.create(
      { model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of stream) for (const ch of chunk.choices) text += ch.text;
  assert.equal(text, r.choices[0].text);
  // Streamed logprobs: each chunk's arrays cover its tokens; together they are the whole answer's.
  const lpStream = await client.completions.create(
      { model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 2, stream: true });
  const tokens = [], offsets = [];
  let textChunks = 0;
  for await (const chunk of lpStream) {
    for (const ch of chunk.choices) {
      if (ch.text) textChunks++;
      if (!ch.logprobs) continue;
      assert.equal(ch.logprobs.tokens.length, ch.logprobs.token_logprobs.length);
      assert.equal(ch.logprobs.tokens.length, ch.logprobs.top_logprobs.length);
      tokens.push(...ch.logprobs.tokens);
      offsets.push(...ch.logprobs.text_offset);
    }
  }
  assert.ok(textChunks >= 2);
  assert.deepEqual(tokens, r.choices[0].logprobs.tokens);
  assert.deepEqual(offsets, r.choices[0].logprobs.text_offset);
});

await check('audio: transcriptions and translations through the client\'s multipart upload', async () => {
  const { toFile } = await import(require.resolve('openai'));
  const fs = await import('node:fs');
  const clip = fs.readFileSync(path.join(root, 'tests/goldens/audio/clips/speech.wav'));
  const t = await client.audio.transcriptions.create(
      { file: await toFile(clip, 'speech.wav'), model });
  assert.equal(typeof t.text, 'string');
  assert.equal(t.usage.type, 'tokens');
  const v = await client.audio.transcriptions.create(
      { file: await toFile(clip, 'speech.wav'), model, response_format: 'verbose_json',
        language: 'en' });
  assert.equal(typeof v.text, 'string');
  assert.equal(v.language, 'en');
  assert.ok(v.duration > 1 && v.duration < 30, `duration ${v.duration}`);
  const text = await client.audio.translations.create(
      { file: await toFile(clip, 'speech.wav'), model, response_format: 'text' });
  assert.equal(typeof text, 'string');
  const junk = await toFile(Buffer.from('not audio'), 'x.wav');
  await expectStatus(400, () => client.audio.transcriptions.create({ file: junk, model }), 'file');
});

await check('errors: 400 naming the field, 404 unknown model', async () => {
  await expectStatus(400, () => client.chat.completions.create(
      { model, messages: user('x'), temperature: 'hot' }), 'temperature');
  await expectStatus(400, () => client.chat.completions.create(
      { model, messages: user('x'), top_p: 3 }), 'top_p');
  await expectStatus(400, () => client.chat.completions.create(
      { model, messages: user('x'), max_tokens: 1e9 }), 'max_tokens');
  await expectStatus(400, () => client.chat.completions.create({
    model, messages: user('x'),
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string', pattern: '(' } } } } },
  }));
  await expectStatus(404, () => client.chat.completions.create(
      { model: 'gpt-4o', messages: user('x') }), 'model');
  await expectStatus(400, () => client.chat.completions.create(
      { model, messages: user('x'), stream: true, tool_choice: 'required' }), 'tool_choice');
});

await check('streaming: aborting mid-stream cancels the generation on the server', async () => {
  const before = await metric('gemma_cancelled_total');
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
      { model, messages: user('Long'), max_tokens: 400, temperature: 0, ignore_eos: true, stream: true },
      { signal: ac.signal });
  let n = 0;
  try {
    for await (const chunk of stream) { if (++n === 3) ac.abort(); }
  } catch (e) {
    assert.ok(e.name === 'AbortError' || e instanceof OpenAI.APIUserAbortError, String(e));
  }
  let after = before;
  for (let i = 0; i < 100 && after === before; i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = await metric('gemma_cancelled_total');
  }
  assert.equal(after, before + 1);
  const h = await (await fetch(new URL('/health', baseURL))).json();
  assert.equal(h.status, 'ok');
});

if (keyedURL) {
  await check('api key: missing or wrong key is 401, the right key works', async () => {
    const wrong = new OpenAI({ baseURL: keyedURL, apiKey: 'nope', maxRetries: 0 });
    const e = await expectStatus(401, () => wrong.models.list());
    assert.ok(e instanceof OpenAI.AuthenticationError);
    const right = new OpenAI({ baseURL: keyedURL, apiKey, maxRetries: 0 });
    const list = await right.models.list();
    assert.equal(list.data.length, 1);
    const health = await fetch(new URL('/health', keyedURL));
    assert.equal(health.status, 200);
  });
}

async function metric(name) {
  const text = await (await fetch(new URL('/metrics', baseURL))).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return Number(line.split(' ')[1]);
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
