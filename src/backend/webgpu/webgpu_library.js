// The WebGPU device layer under the webgpu backend (webgpu_backend.cc), as an Emscripten JavaScript
// library: buffers, pipelines and dispatches by small integer handles, recorded and submitted in
// command buffers of up to 64 dispatches (the last at the step's readback). Two calls are
// asynchronous (Asyncify suspends the C++ caller): gw_init (adapter and device) and gw_read (the
// step's readback). The GPU comes from Module.gpu (Node: Dawn's `create()`), else navigator.gpu.
mergeInto(LibraryManager.library, {
  $GW: {
    device: null,
    generation: 0,
    lost: '',
    error: '',
    info: '',
    kernels: 0,           // 1: the workgroup kernels (*_wg.wgsl), 0: one invocation per row
    packedDot: 0,         // 1: WGSL has dot4I8Packed (packed_4x8_integer_dot_product)
    subgroups: 0,         // 1: the workgroup kernels reduce with subgroup operations (the device has `subgroups`)
    matvecWorkgroups: -1, // the decode matvecs' grid cap (Module.gpuMatvecWorkgroups); -1: the backend's default
    buffers: [null],
    pipelines: [null],
    params: null,         // ArrayBuffer of 256-byte parameter slots for the current step
    paramSlots: 0,
    paramBuffer: null,
    paramCapacity: 0,
    staging: null,
    stagingSize: 0,
    dummy: null,
    pending: [],
    // Bind groups by pipeline, parameter slot and buffers: a decode step records the same
    // dispatches every time, so after the first step no bind group is created (each creation
    // is a validated call into the implementation). Emptied when a buffer goes away.
    bindGroups: new Map(),
    fail: function(message) {
      if (!GW.error) GW.error = message;
      return -1;
    },
    ok: function() {
      return GW.device && !GW.lost && !GW.error;
    },
    flushEvery: 64,
    // A step's first submit comes sooner (its first flushFirst dispatches), so the GPU starts on
    // them while the host records the rest: after the previous step's readback both sides had
    // waited for 64 dispatches' recording.
    flushFirst: 16,
    // Encodes the recorded dispatches into a command buffer of their own and submits it, after
    // writing their parameter slots into the parameter buffer (grown when the step's slots
    // outgrow it: work already submitted keeps the old one, which Dawn frees once it is done).
    flush: function() {
      if (!GW.pending.length || !GW.ok()) return;
      const first = GW.pending[0].slot;
      const bytes = GW.paramSlots * 256;
      if (bytes > GW.paramCapacity) {
        if (GW.paramBuffer) GW.paramBuffer.destroy();
        GW.bindGroups.clear();
        GW.paramCapacity = Math.max(bytes, 2 * GW.paramCapacity, 64 * 256);
        GW.paramBuffer = GW.device.createBuffer({ size: GW.paramCapacity,
                                                  usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
      }
      GW.device.queue.writeBuffer(GW.paramBuffer, first * 256, GW.params, first * 256, bytes - first * 256);
      const encoder = GW.device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      let last = null;
      for (const d of GW.pending) {
        const pipeline = GW.pipelines[d.p];
        let group = GW.bindGroups.get(d.key);
        if (!group) {
          const entries = [{ binding: 0, resource: { buffer: GW.paramBuffer, offset: d.slot * 256, size: 256 } }];
          d.handles.forEach((h, i) => entries.push({ binding: i + 1, resource: { buffer: h ? GW.buffers[h] : GW.dummy } }));
          group = GW.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
          if (GW.bindGroups.size >= 65536) GW.bindGroups.clear();  // many contexts' shapes
          GW.bindGroups.set(d.key, group);
        }
        if (pipeline !== last) pass.setPipeline(pipeline);
        last = pipeline;
        pass.setBindGroup(0, group);
        pass.dispatchWorkgroups(d.gx, d.gy, d.gz);
      }
      pass.end();
      GW.device.queue.submit([encoder.finish()]);
      GW.pending = [];
    },
  },

  gw_init__deps: ['$GW'],
  gw_init__sig: 'i',
  gw_init: function() {
    return Asyncify.handleAsync(async () => {
      // Models of one module share the device (and the handle tables) while it works.
      if (GW.ok()) return 0;
      GW.error = '';
      const gpu = Module['gpu'] || (typeof navigator !== 'undefined' ? navigator.gpu : undefined);
      if (!gpu) return GW.fail('WebGPU is not available here (no navigator.gpu)');
      let adapter;
      try {
        adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
      } catch (e) {
        return GW.fail('requestAdapter failed: ' + e.message);
      }
      if (!adapter) return GW.fail('WebGPU has no adapter here');
      const want = {};
      for (const k of ['maxBufferSize', 'maxStorageBufferBindingSize', 'maxStorageBuffersPerShaderStage',
                       'maxComputeWorkgroupsPerDimension']) {
        want[k] = adapter.limits[k];
      }
      const ai = adapter.info || {};
      GW.info = [ai.vendor, ai.architecture, ai.device, ai.description].filter((s) => s).join(' ') || 'WebGPU adapter';
      // The kernel family: Module.gpuKernels ('workgroup' | 'rows' | 'auto'); auto takes the
      // workgroup kernels except on adapters that run on the CPU (SwiftShader, llvmpipe, WARP),
      // where a workgroup barrier costs a coroutine switch per invocation (docs/webgpu.md).
      const choice = Module['gpuKernels'] || 'auto';
      const cpuAdapter = adapter.isFallbackAdapter || ai.isFallbackAdapter ||
                         /swiftshader|llvmpipe|lavapipe|warp|microsoft basic render/i.test(GW.info);
      GW.kernels = choice === 'workgroup' || (choice === 'auto' && !cpuAdapter) ? 1 : 0;
      // Subgroup reductions in the workgroup kernels where the adapter has the feature, unless
      // Module.gpuSubgroups is false (the library's webgpu.subgroups); the feature is requested
      // only then. Other features (shader-f16, ...) are neither requested nor used.
      const features = adapter.features;
      const hasSubgroups = !!(features && typeof features.has === 'function' && features.has('subgroups'));
      GW.subgroups = GW.kernels && hasSubgroups && Module['gpuSubgroups'] !== false ? 1 : 0;
      // The decode matvecs' workgroups (linear_mv_wg.wgsl loops over row blocks): the library's
      // webgpu.matvecWorkgroups (0: a workgroup per block), else the backend's default.
      const mv = Module['gpuMatvecWorkgroups'];
      GW.matvecWorkgroups = Number.isInteger(mv) && mv >= 0 ? mv : -1;
      let device;
      try {
        device = await adapter.requestDevice({ requiredLimits: want,
                                               requiredFeatures: GW.subgroups ? ['subgroups'] : [] });
      } catch (e) {
        return GW.fail('requestDevice failed: ' + e.message);
      }
      const wgsl = gpu.wgslLanguageFeatures;
      GW.packedDot = wgsl && wgsl.has('packed_4x8_integer_dot_product') ? 1 : 0;
      GW.device = device;
      GW.lost = '';
      GW.generation++;
      const generation = GW.generation;
      device.lost.then((info) => {
        if (GW.generation === generation) GW.lost = 'WebGPU device lost: ' + (info.message || info.reason || 'unknown');
      });
      device.onuncapturederror = (ev) => {
        if (!GW.error) GW.error = 'WebGPU error: ' + ev.error.message;
      };
      GW.buffers = [null];
      GW.pipelines = [null];
      GW.pending = [];
      GW.paramSlots = 0;
      GW.paramBuffer = null;
      GW.paramCapacity = 0;
      GW.staging = null;
      GW.stagingSize = 0;
      GW.params = new ArrayBuffer(256 * 64);
      GW.bindGroups = new Map();
      GW.dummy = device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE });
      return 0;
    });
  },

  gw_kernels__deps: ['$GW'],
  gw_kernels: function() { return GW.kernels; },

  gw_packed_dot__deps: ['$GW'],
  gw_packed_dot: function() { return GW.packedDot; },

  gw_subgroups__deps: ['$GW'],
  gw_subgroups: function() { return GW.subgroups; },

  gw_matvec_workgroups__deps: ['$GW'],
  gw_matvec_workgroups: function() { return GW.matvecWorkgroups; },

  gw_generation__deps: ['$GW'],
  gw_generation: function() { return GW.generation; },

  // 0 while the device works; 1 once it is lost or failed (gw_error says why).
  gw_failed__deps: ['$GW'],
  gw_failed: function() { return GW.ok() ? 0 : 1; },

  gw_error__deps: ['$GW'],
  gw_error: function(out, len) {
    stringToUTF8(GW.lost || GW.error || '', out, len);
  },

  gw_info__deps: ['$GW'],
  gw_info: function(out, len) { stringToUTF8(GW.info, out, len); },

  gw_max_buffer__deps: ['$GW'],
  gw_max_buffer: function() {
    return GW.device ? Math.min(GW.device.limits.maxBufferSize, GW.device.limits.maxStorageBufferBindingSize) : 0;
  },

  // A storage buffer of `bytes` (rounded up to 4); its handle, or -1.
  gw_buffer__deps: ['$GW'],
  gw_buffer: function(bytes) {
    bytes >>>= 0;
    if (!GW.ok()) return -1;
    const size = Math.max(16, Math.ceil(bytes / 4) * 4);
    try {
      const b = GW.device.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST |
                                                       GPUBufferUsage.COPY_SRC });
      GW.buffers.push(b);
      return GW.buffers.length - 1;
    } catch (e) {
      return GW.fail('createBuffer(' + size + ') failed: ' + e.message);
    }
  },

  gw_release__deps: ['$GW'],
  gw_release: function(h) {
    const b = GW.buffers[h];
    if (b) {
      b.destroy();
      GW.buffers[h] = null;
      GW.bindGroups.clear();
    }
  },

  // Copies `bytes` (a multiple of 4) from the heap into buffer h at byte `offset`.
  gw_write__deps: ['$GW'],
  gw_write: function(h, offset, src, bytes) {
    offset >>>= 0;
    src >>>= 0;
    bytes >>>= 0;
    if (!GW.ok() || bytes <= 0) return;
    GW.device.queue.writeBuffer(GW.buffers[h], offset, HEAPU8.buffer, src, bytes);
  },

  // A compute pipeline from WGSL with entry point main: its handle; -1 when the device has failed
  // (gw_error says why); -2 when this module does not compile (gw_pipeline_error: the compiler's
  // message; the device keeps working). Compiled asynchronously with the module's validation in
  // an error scope, so a rejected shader is an answer here, not a later uncaptured error.
  // Module.gpuRejectSubgroupShaders (tests only, as a device fault is injected) rejects every
  // module that enables subgroups, as a driver whose compiler refuses them would;
  // Module.gpuRejectKernels (tests only: a regular expression) the kernels whose labels match.
  gw_pipeline__deps: ['$GW'],
  gw_pipeline__sig: 'iii',
  gw_pipeline: function(label, code) {
    return Asyncify.handleAsync(async () => {
      if (!GW.ok()) return -1;
      const name = UTF8ToString(label), text = UTF8ToString(code);
      GW.pipelineError = '';
      try {
        if (Module['gpuRejectSubgroupShaders'] && /^enable subgroups;/m.test(text)) {
          throw new Error('subgroup shaders rejected (Module.gpuRejectSubgroupShaders)');
        }
        if (Module['gpuRejectKernels'] && new RegExp(Module['gpuRejectKernels']).test(name)) {
          throw new Error('rejected (Module.gpuRejectKernels)');
        }
        GW.device.pushErrorScope('validation');
        const module = GW.device.createShaderModule({ label: name, code: text });
        const invalid = await GW.device.popErrorScope();
        if (invalid) throw new Error(invalid.message);
        const p = await GW.device.createComputePipelineAsync({ label: name, layout: 'auto',
                                                              compute: { module, entryPoint: 'main' } });
        GW.pipelines.push(p);
        return GW.pipelines.length - 1;
      } catch (e) {
        if (!GW.ok()) return -1;
        GW.pipelineError = 'pipeline ' + name + ': ' + e.message;
        return -2;
      }
    });
  },

  gw_pipeline_error__deps: ['$GW'],
  gw_pipeline_error: function(out, len) { stringToUTF8(GW.pipelineError || '', out, len); },

  // Records pipeline p over groups (gx, gy, gz): binding 0 gets the `nparams` u32 parameters,
  // bindings 1.. the buffers (0 = a small unused buffer). Every GW.flushEvery dispatches the
  // recorded ones are encoded and submitted, so the GPU runs a step's first layers while the
  // rest are being recorded (an E2B decode step has ~530 dispatches; encoding them all before one
  // submit left the GPU idle for that time).
  gw_dispatch__deps: ['$GW'],
  gw_dispatch: function(p, bufs, nbufs, params, nparams, gx, gy, gz) {
    if (!GW.ok()) return;
    if ((GW.paramSlots + 1) * 256 > GW.params.byteLength) {
      const bigger = new ArrayBuffer(GW.params.byteLength * 2);
      new Uint8Array(bigger).set(new Uint8Array(GW.params));
      GW.params = bigger;
    }
    const slot = GW.paramSlots++;
    new Uint32Array(GW.params, slot * 256, nparams).set(HEAPU32.subarray(params >>> 2, (params >>> 2) + nparams));
    const handles = HEAP32.subarray(bufs >>> 2, (bufs >>> 2) + nbufs);
    GW.pending.push({ p, slot, handles: Array.from(handles), key: p + ':' + slot + ':' + handles.join(','), gx, gy, gz });
    if (GW.pending.length >= (slot < GW.flushFirst ? GW.flushFirst : GW.flushEvery)) GW.flush();
  },

  // Submits what was recorded; 0, or -1 when the device is lost or failed. The parameter slots
  // start again at 0 for the next step (the queue writes them after this step's work).
  gw_submit__deps: ['$GW'],
  gw_submit: function() {
    if (!GW.ok()) return -1;
    GW.flush();
    GW.paramSlots = 0;
    return GW.ok() ? 0 : -1;
  },

  // Submits what was recorded and copies `bytes` of buffer h from `offset` into the heap at dst
  // once the GPU is done; 0, or -1 on a lost or failed device.
  gw_read__deps: ['$GW', 'gw_submit'],
  gw_read__sig: 'iiiii',
  gw_read: function(h, offset, dst, bytes) {
    offset >>>= 0;
    dst >>>= 0;
    bytes >>>= 0;
    return Asyncify.handleAsync(async () => {
      if (_gw_submit() !== 0) return -1;
      const size = Math.ceil(bytes / 4) * 4;
      if (size > GW.stagingSize) {
        if (GW.staging) GW.staging.destroy();
        GW.stagingSize = Math.max(size, 2 * GW.stagingSize, 4096);
        GW.staging = GW.device.createBuffer({ size: GW.stagingSize,
                                              usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      }
      const enc = GW.device.createCommandEncoder();
      enc.copyBufferToBuffer(GW.buffers[h], offset, GW.staging, 0, size);
      GW.device.queue.submit([enc.finish()]);
      try {
        await GW.staging.mapAsync(GPUMapMode.READ, 0, size);
      } catch (e) {
        if (!GW.lost && !GW.error) GW.error = 'readback failed: ' + e.message;
        return -1;
      }
      if (!GW.ok()) {
        GW.staging.unmap();
        return -1;
      }
      HEAPU8.set(new Uint8Array(GW.staging.getMappedRange(0, size), 0, bytes), dst);
      GW.staging.unmap();
      return 0;
    });
  },

  // Tests: destroys the device (what a lost GPU looks like to the backend).
  gw_destroy_device__deps: ['$GW'],
  gw_destroy_device: function() {
    if (GW.device) GW.device.destroy();
  },
});
