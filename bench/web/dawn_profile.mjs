// Dawn for Node with a GPU profile of every dispatch (timestamp queries), for
// `webgpu_bench.mjs ... profile`: a stand-in for the npm package `webgpu` (the worker imports
// this file as its WebGPU module). Each dispatch runs in a compute pass of its own with timestamp
// writes (the pass boundaries add a little time of their own: a ranking, not a speed figure);
// every 32 submits the worker prints, per kernel label, the GPU time and calls since the last
// print, and per submit the GPU time summed against the wall time from submit to the next submit.
// With GEMMA_DAWN_PROFILE=pass in the environment (webgpu_bench.mjs's "passprofile") the passes stay
// as the library records them (a submit's dispatches in one pass) and only each pass is timed: per
// submit, the GPU time of its dispatches as they really run, against the wall time between
// submits and the host time spent inside Dawn's encoding calls (setPipeline, setBindGroup,
// dispatchWorkgroups, end, finish, submit): whether a step waits on the GPU or on its recording.
// Not part of the library: the module's code is unchanged under it.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const root = path.resolve(new URL('../..', import.meta.url).pathname);
const dawn = await import(pathToFileURL(path.join(root, '.cache/npm-assets/node_modules/webgpu/index.js')).href);
export const globals = dawn.globals;

const QUERIES = 4096;  // (WebGPU's limit) 2,048 timed dispatches per submit; the rest run untimed
const stats = { kernels: new Map(), submits: 0, gpuNs: 0, wallMs: 0, dispatches: 0, untimed: 0, hostMs: 0 };
let lastSubmit = 0;
const passMode = process.env.GEMMA_DAWN_PROFILE === 'pass';
// The host time inside a Dawn call (pass mode).
function hostTimed(f) {
  const t0 = performance.now();
  const r = f();
  stats.hostMs += performance.now() - t0;
  return r;
}

function report() {
  if (passMode) {
    const n = Math.max(1, stats.submits);
    console.log(`[profile] ${stats.submits} submits, ${(stats.dispatches / n).toFixed(1)} dispatches each: GPU ` +
                `${(stats.gpuNs / 1e6 / n).toFixed(3)} ms per submit (${(stats.gpuNs / 1e3 / Math.max(1, stats.dispatches)).toFixed(2)} us per dispatch), ` +
                `wall between submits ${(stats.wallMs / Math.max(1, stats.submits - 1)).toFixed(3)} ms, ` +
                `host inside Dawn ${(stats.hostMs / n).toFixed(3)} ms per submit`);
    Object.assign(stats, { submits: 0, gpuNs: 0, wallMs: 0, dispatches: 0, untimed: 0, hostMs: 0 });
    return;
  }
  const rows = [...stats.kernels.entries()].sort((a, b) => b[1].ns - a[1].ns);
  const total = rows.reduce((s, [, v]) => s + v.ns, 0);
  console.log(`[profile] ${stats.submits} submits, ${stats.dispatches} dispatches (${stats.untimed} untimed): ` +
              `GPU ${(stats.gpuNs / 1e6 / stats.submits).toFixed(3)} ms per submit, wall between submits ` +
              `${(stats.wallMs / Math.max(1, stats.submits - 1)).toFixed(3)} ms`);
  for (const [label, v] of rows.slice(0, 14)) {
    console.log(`[profile]   ${label.padEnd(28)} ${(v.ns / 1e6).toFixed(3).padStart(9)} ms ${(100 * v.ns / total).toFixed(1).padStart(5)}%  ` +
                `${String(v.n).padStart(6)} calls  ${(v.ns / 1e3 / v.n).toFixed(1).padStart(8)} us each`);
  }
  stats.kernels.clear();
  Object.assign(stats, { submits: 0, gpuNs: 0, wallMs: 0, dispatches: 0, untimed: 0 });
}

// A proxy that forwards everything to the native object (methods bound to it) except `over`.
function wrap(target, over) {
  return new Proxy(target, {
    get(t, k) {
      if (k in over) return over[k];
      const v = Reflect.get(t, k, t);
      return typeof v === 'function' ? v.bind(t) : v;
    },
    set(t, k, v) {
      return Reflect.set(t, k, v, t);
    },
  });
}

function wrapDevice(device) {
  // Records the copy of `count` timestamps of qs into a mappable buffer; {qs, resolve, read}.
  const resolveTimes = (enc, qs, count) => {
    const bytes = 8 * count;
    const resolve = device.createBuffer({ size: bytes, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
    const read = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    enc.resolveQuerySet(qs, 0, count, resolve, 0);
    enc.copyBufferToBuffer(resolve, 0, read, 0, bytes);
    return { qs, resolve, read };
  };
  const labels = new WeakMap();
  const pending = new Map();  // command buffer -> {qs, resolve, read, labels}
  const passEncoder = (enc) => {
    let qs = null;
    let n = 0;
    return wrap(enc, {
      beginComputePass: (d) => {
        // (one pass per command buffer, as the library records them)
        qs = device.createQuerySet({ type: 'timestamp', count: 2 });
        const real = enc.beginComputePass({ ...d, timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } });
        return wrap(real, {
          setPipeline: (p) => hostTimed(() => real.setPipeline(p)),
          setBindGroup: (...a) => hostTimed(() => real.setBindGroup(...a)),
          dispatchWorkgroups: (...a) => { ++n; return hostTimed(() => real.dispatchWorkgroups(...a)); },
          end: () => hostTimed(() => real.end()),
        });
      },
      finish: (d) => {
        if (!qs) return hostTimed(() => enc.finish(d));  // (the readback's copy)
        const info = resolveTimes(enc, qs, 2);
        const cb = hostTimed(() => enc.finish(d));
        pending.set(cb, { ...info, labels: ['pass'], n });
        return cb;
      },
    });
  };
  const encoder = (enc) => {
    let qs = null;
    const timed = [];
    const cur = {};
    let n = 0;
    const pass = {
      setPipeline(p) { cur.p = p; },
      setBindGroup(i, g) { cur.g = g; cur.i = i; },
      dispatchWorkgroups(x, y = 1, z = 1) {
        if (!qs) qs = device.createQuerySet({ type: 'timestamp', count: QUERIES });
        const desc = n < QUERIES / 2 ? { timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 2 * n, endOfPassWriteIndex: 2 * n + 1 } } : {};
        const real = enc.beginComputePass(desc);
        real.setPipeline(cur.p);
        real.setBindGroup(cur.i, cur.g);
        real.dispatchWorkgroups(x, y, z);
        real.end();
        if (n < QUERIES / 2) timed.push(labels.get(cur.p) ?? 'unlabeled');
        else ++stats.untimed;
        ++n;
        ++stats.dispatches;
      },
      end() {},
    };
    return wrap(enc, {
      beginComputePass: () => pass,
      finish: (d) => {
        let info = null;
        if (timed.length) {
          info = { ...resolveTimes(enc, qs, 2 * timed.length), labels: timed };
        } else if (qs) {
          qs.destroy();
        }
        const cb = enc.finish(d);
        if (info) pending.set(cb, info);
        return cb;
      },
    });
  };
  const queue = wrap(device.queue, {
    submit: (cbs) => {
      hostTimed(() => device.queue.submit(cbs));
      const now = performance.now();
      if (lastSubmit) stats.wallMs += now - lastSubmit;
      lastSubmit = now;
      for (const cb of cbs) {
        const info = pending.get(cb);
        if (!info) continue;
        pending.delete(cb);
        ++stats.submits;
        if (passMode) stats.dispatches += info.n;
        info.read.mapAsync(GPUMapMode.READ).then(() => {
          const t = new BigUint64Array(info.read.getMappedRange());
          info.labels.forEach((label, i) => {
            const ns = Number(t[2 * i + 1] - t[2 * i]);
            const k = stats.kernels.get(label) ?? { ns: 0, n: 0 };
            k.ns += ns;
            k.n += 1;
            stats.kernels.set(label, k);
            stats.gpuNs += ns;
          });
          info.read.unmap();
          for (const b of [info.read, info.resolve, info.qs]) b.destroy();
          if (stats.submits >= 32) report();
        }, () => {});
      }
    },
  });
  return wrap(device, {
    queue,
    createCommandEncoder: (d) => (passMode ? passEncoder : encoder)(device.createCommandEncoder(d)),
    createComputePipeline: (d) => {
      const p = device.createComputePipeline(d);
      labels.set(p, d.label ?? 'unlabeled');
      return p;
    },
    createComputePipelineAsync: async (d) => {
      const p = await device.createComputePipelineAsync(d);
      labels.set(p, d.label ?? 'unlabeled');
      return p;
    },
  });
}

export function create(flags) {
  const gpu = dawn.create(flags);
  return wrap(gpu, {
    requestAdapter: async (opts) => {
      const adapter = await gpu.requestAdapter(opts);
      if (!adapter) return adapter;
      return wrap(adapter, {
        requestDevice: async (desc = {}) => {
          if (!adapter.features.has('timestamp-query')) {
            console.log('[profile] the adapter has no timestamp-query: no profile');
            return adapter.requestDevice(desc);
          }
          const requiredFeatures = [...(desc.requiredFeatures ?? []), 'timestamp-query'];
          return wrapDevice(await adapter.requestDevice({ ...desc, requiredFeatures }));
        },
      });
    },
  });
}
