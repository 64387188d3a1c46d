// The model cache of the page: checkpoints downloaded into the Origin Private File System with
// HTTP Range requests, resumable after an interruption or a reload, verified (size, and SHA-256
// when the caller knows it), with progress; an inventory and deletion. Cached files open as File
// objects that loadEngine reads in slices (never one ArrayBuffer of the whole file).
//
//   import * as cache from './model-cache.mjs';
//   await cache.download('tiny-trained', 'https://host/models/tiny-trained/', { onProgress });
//   const engine = await loadEngine({ model: await cache.files('tiny-trained'), name: 'tiny-trained' });
//   await cache.list();   // [{name, bytes, complete, files: [{name, size, done}]}]
//   await cache.remove('tiny-trained');
//
// Layout: OPFS gemma-models/<name>/<file> and <name>/manifest.json ({url, files: {file: {size,
// sha256?, done}}}); a file's bytes so far are its length, so a download resumes where it stopped.

export const DEFAULT_FILES = ['config.json', 'model.safetensors', 'tokenizer.json'];
export const OPTIONAL_FILES = ['generation_config.json', 'chat_template.jinja'];

async function root() {
  const top = await navigator.storage.getDirectory();
  return top.getDirectoryHandle('gemma-models', { create: true });
}

async function readJson(dir, name) {
  try {
    return JSON.parse(await (await (await dir.getFileHandle(name)).getFile()).text());
  } catch {
    return null;
  }
}

async function writeJson(dir, name, value) {
  const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
  await w.write(JSON.stringify(value));
  await w.close();
}

// SHA-256 (FIPS 180-4) over a stream of chunks: SubtleCrypto digests only whole buffers.
export class Sha256 {
  constructor() {
    this.h = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
    this.buf = new Uint8Array(64);
    this.n = 0;
    this.total = 0;
    this.w = new Uint32Array(64);
  }
  static K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]);
  block(p, o) {
    const w = this.w, h = this.h, K = Sha256.K;
    for (let i = 0; i < 16; ++i) w[i] = (p[o + 4 * i] << 24) | (p[o + 4 * i + 1] << 16) | (p[o + 4 * i + 2] << 8) | p[o + 4 * i + 3];
    for (let i = 16; i < 64; ++i) {
      const a = w[i - 15], b = w[i - 2];
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 64; ++i) {
      const t1 = (hh + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
      const t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      hh = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  update(bytes) {
    let i = 0;
    this.total += bytes.length;
    if (this.n) {
      const take = Math.min(64 - this.n, bytes.length);
      this.buf.set(bytes.subarray(0, take), this.n);
      this.n += take;
      i = take;
      if (this.n < 64) return this;
      this.block(this.buf, 0);
      this.n = 0;
    }
    for (; i + 64 <= bytes.length; i += 64) this.block(bytes, i);
    this.buf.set(bytes.subarray(i), 0);
    this.n = bytes.length - i;
    return this;
  }
  hex() {
    const bits = this.total * 8;
    const pad = new Uint8Array(((this.n < 56 ? 56 : 120) - this.n) + 8);
    pad[0] = 0x80;
    const view = new DataView(pad.buffer);
    view.setUint32(pad.length - 8, Math.floor(bits / 2 ** 32));
    view.setUint32(pad.length - 4, bits >>> 0);
    this.update(pad);
    return [...this.h].map((x) => x.toString(16).padStart(8, '0')).join('');
  }
}

async function hashFile(file, sha) {
  const step = 8 << 20;
  for (let at = 0; at < file.size; at += step) {
    sha.update(new Uint8Array(await file.slice(at, at + step).arrayBuffer()));
  }
}

// Downloads (or resumes) a model's files into the cache. `expect` may give {file: {size,
// sha256}} to verify against; without it the size is the server's (Content-Range /
// Content-Length). Rejects on an HTTP or network failure: call again to resume.
export async function download(name, url, { files = DEFAULT_FILES, optional = OPTIONAL_FILES, expect = {},
                                            onProgress, signal } = {}) {
  const dir = await (await root()).getDirectoryHandle(name, { create: true });
  const base = String(url).replace(/\/?$/, '/');
  const manifest = (await readJson(dir, 'manifest.json')) ?? { url: base, files: {} };
  manifest.url = base;
  for (const file of [...files, ...optional]) {
    const entry = manifest.files[file] ?? {};
    if (entry.done) continue;
    const handle = await dir.getFileHandle(file, { create: true });
    let have = (await handle.getFile()).size;
    const headers = have > 0 ? { Range: `bytes=${have}-` } : {};
    const res = await fetch(base + file, { headers, signal, cache: 'no-store' });
    if (res.status === 404 && optional.includes(file)) continue;
    if (res.status === 416 && have > 0) {
      // Nothing left to fetch: the file is whole (the last attempt stopped before its record).
    } else if (!res.ok) {
      throw new Error(`${base + file}: HTTP ${res.status}`);
    }
    let total;
    const w = await handle.createWritable({ keepExistingData: res.status === 206 });
    if (res.status === 206) {
      await w.seek(have);
      total = Number((res.headers.get('content-range') ?? '').split('/')[1]);
    } else if (res.status !== 416) {
      have = 0;  // the server ignored the range: start over
      total = Number(res.headers.get('content-length')) || undefined;
    }
    entry.size = expect[file]?.size ?? total ?? entry.size;
    manifest.files[file] = entry;
    await writeJson(dir, 'manifest.json', manifest);
    if (res.status !== 416) {
      const reader = res.body.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          await w.write(value);
          have += value.length;
          onProgress?.({ name, file, loaded: have, total: entry.size });
        }
      } finally {
        await w.close();  // what arrived stays: the next call resumes after it
      }
    } else {
      await w.close();
    }
    const got = await handle.getFile();
    if (entry.size !== undefined && got.size !== entry.size) {
      throw new Error(`${file}: ${got.size} bytes, expected ${entry.size}`);
    }
    const want = expect[file]?.sha256;
    if (want) {
      const sha = new Sha256();
      await hashFile(got, sha);
      const hex = sha.hex();
      if (hex !== want) {
        await dir.removeEntry(file);
        throw new Error(`${file}: SHA-256 ${hex}, expected ${want}; removed`);
      }
      entry.sha256 = hex;
    }
    entry.size = got.size;
    entry.done = true;
    await writeJson(dir, 'manifest.json', manifest);
  }
  manifest.complete = files.every((f) => manifest.files[f]?.done);
  await writeJson(dir, 'manifest.json', manifest);
  return manifest;
}

// [{name, url, bytes, complete, files: [{name, size, bytes, done}]}]
export async function list() {
  const out = [];
  for await (const [name, handle] of (await root()).entries()) {
    if (handle.kind !== 'directory') continue;
    const manifest = (await readJson(handle, 'manifest.json')) ?? { files: {} };
    const files = [];
    let bytes = 0;
    for await (const [file, h] of handle.entries()) {
      if (h.kind !== 'file' || file === 'manifest.json') continue;
      const size = (await h.getFile()).size;
      bytes += size;
      files.push({ name: file, size: manifest.files[file]?.size, bytes: size, done: !!manifest.files[file]?.done });
    }
    out.push({ name, url: manifest.url, bytes, complete: !!manifest.complete, files });
  }
  return out;
}

// The cached files of a complete model, as File objects for loadEngine({model}).
export async function files(name) {
  const dir = await (await root()).getDirectoryHandle(name);
  const manifest = await readJson(dir, 'manifest.json');
  if (!manifest?.complete) throw new Error(`${name}: not completely downloaded`);
  const out = [];
  for (const [file, entry] of Object.entries(manifest.files)) {
    if (entry.done) out.push(await (await dir.getFileHandle(file)).getFile());
  }
  return out;
}

export async function remove(name) {
  await (await root()).removeEntry(name, { recursive: true });
}

// {usage, quota} in bytes (navigator.storage.estimate), and whether storage is persistent.
export async function estimate() {
  const e = await navigator.storage.estimate();
  const persisted = navigator.storage.persisted ? await navigator.storage.persisted() : false;
  return { usage: e.usage, quota: e.quota, persisted };
}
