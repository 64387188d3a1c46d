// The backend seam: a backend evaluates the whole model for a run of tokens, owning the K/V caches.
//
// Two objects, as llama.cpp's llama_model / llama_context: a BackendModel, one per engine, holds
// what sessions share (weight copies or device weights, the device and its pipelines, the thread
// pool); a Backend (a context), one per session, holds one conversation's K/V caches, scratch and
// command buffers. Ten sessions cost ten sets of caches, never ten copies of the weights.
//
// Caches hold the evaluated tokens [0, cached()). Forward appends tokens at positions cached(),
// cached()+1, ... and produces the requested outputs. Sliding-window layers keep rings of
// window + slack entries, so a rewind (Truncate) of up to `slack` tokens is exact; a longer rewind
// reports false and the caller re-prefills from a reset. KV-shared layers read their owner's cache.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gemma {

class Model;

enum class OutputMode {
  kNone,    // only fill caches (prefill of a prefix)
  kArgmax,  // token id with the largest logit (lowest id on ties)
  kLogits,  // full f32 logits (after the final softcap)
  kSelect,  // best id among `allowed` and its log-prob under the full softmax
};

struct ForwardRequest {
  std::span<const int32_t> tokens;
  // Image soft tokens spliced into the input: empty, or one entry per token, null for ordinary
  // tokens and otherwise the token's input embedding (text hidden floats, from EncodeImage) in
  // place of its embedding row. The token id (an image placeholder) still picks the PLE row,
  // which is the pad row for placeholders (Model::EmbedId), as transformers does.
  std::span<const float* const> soft = {};
  OutputMode mode = OutputMode::kArgmax;
  bool all_positions = false;  // outputs for every token, else only the last one
  const std::vector<uint64_t>* allowed = nullptr;  // kSelect: bitmask over the vocabulary
};

struct ForwardResult {
  std::vector<int32_t> ids;     // kArgmax / kSelect: one per output position
  std::vector<float> logprobs;  // kSelect: one per output position
  std::vector<float> logits;    // kLogits: [positions, vocab]
};

struct BackendCapabilities {
  bool logits = true;
  bool select = true;
  int max_chunk = 0;  // largest prefill chunk evaluated at once (0 = any)
  bool soft_tokens = false;  // honors ForwardRequest::soft (image input)
};

// One image after Gemma4ImageProcessor, real patches only (row-major, position x = i % patches_w,
// y = i / patches_w).
struct VisionPatches {
  int patches_h = 0, patches_w = 0;
  const float* pixels = nullptr;  // [patches_h * patches_w, 3 * patch_size^2]
};

// One audio chunk (at most 30 s) after Gemma4AudioFeatureExtractor: log-mel frames and their
// validity mask (the valid frames are a prefix).
struct AudioMel {
  int frames = 0;
  const float* mel = nullptr;     // [frames, 128]
  const uint8_t* mask = nullptr;  // [frames], 1 = valid
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual BackendCapabilities capabilities() const = 0;
  // Throws gemma::Error(kCapacity) if cached() + tokens would exceed capacity(); on any throw the
  // caches are left unchanged as far as cached() is concerned (the caller truncates or resets).
  virtual void Forward(const ForwardRequest& request, ForwardResult* result) = 0;
  virtual int cached() const = 0;
  virtual int capacity() const = 0;
  // Keeps the first n tokens. Returns false when sliding caches cannot be restored exactly; the
  // backend is then reset to 0 tokens.
  virtual bool Truncate(int n) = 0;
  virtual void Reset() = 0;
  // Bytes of caches and working buffers this backend holds (weights are mapped, not counted).
  virtual size_t resident_bytes() const = 0;
};

// One sequence's step in a batch (BackendModel::ForwardBatch): a context of the model and its
// request, one token (or, where BackendModel::batches_multi_token_steps(), several with
// all_positions: a speculative verification step).
struct BatchStep {
  Backend* context = nullptr;
  ForwardRequest request;
  ForwardResult* result = nullptr;
  std::exception_ptr error = nullptr;  // set when this step failed (the others may have succeeded)
};

struct BackendOptions {
  int capacity = 32768;  // max tokens in context
  int slack = 0;         // extra sliding-ring entries (0 = one window)
};

// Shared per-engine state. Contexts keep their model alive (they hold a shared_ptr to it) and may
// run on different threads at once: a model serializes the work its contexts cannot overlap (one
// thread pool, one device queue), so concurrent Forward calls on different contexts are safe.
// One context is not thread-safe (the runtime's Session guards it).
// Faults a backend with a device can be made to suffer (BackendModel::InjectDeviceFault).
enum class DeviceFault {
  kDeviceLoss,         // the next submission of any context fails as VK_ERROR_DEVICE_LOST
  kOutOfDeviceMemory,  // the next device-memory allocation fails as out of memory
  kHang,               // the next submission does not finish within the step timeout
};

class BackendModel : public std::enable_shared_from_this<BackendModel> {
 public:
  virtual ~BackendModel() = default;
  virtual std::string name() const = 0;
  // One conversation's caches and scratch; Error(kInvalidArgument / kCapacity / kDevice) when the
  // options cannot be met.
  virtual std::unique_ptr<Backend> NewContext(const BackendOptions& options) = 0;
  // Bytes the model holds for all its contexts (weight copies, device weights); a context's
  // resident_bytes() counts only its own.
  virtual size_t shared_bytes() const = 0;
  // The device contexts run on ("" for the CPU backends) and whether it is a CPU-type device
  // emulating a GPU (much slower than the CPU backends); known once a context exists.
  virtual std::string device() const { return ""; }
  // The vision tower and embed_vision for one image: `soft_tokens` gets [patches / pooling^2,
  // text hidden] floats, the rows that replace the image's placeholder tokens. The default says
  // the backend has no vision tower yet (Error kUnsupported).
  virtual void EncodeImage(const VisionPatches& image, std::vector<float>* soft_tokens);
  // The audio tower and embed_audio for one chunk: `soft_tokens` gets [tokens, text hidden] floats
  // (tokens = the valid entries of mask[::2][::2]). Default: Error kUnsupported.
  virtual void EncodeAudio(const AudioMel& audio, std::vector<float>* soft_tokens);
  virtual bool software_device() const { return false; }
  // Device-local memory the model and all its contexts hold (0 for the CPU backends).
  virtual size_t device_memory_bytes() const { return 0; }
  // Fault injection for reliability runs (gemma-engine soak) and tests; false where the backend
  // has no device.
  virtual bool InjectDeviceFault(DeviceFault) { return false; }
  // Advances several contexts of this model by one token each in one step, reading the weights
  // once for all of them. Each step's result (and its context's caches) is what
  // `context->Forward(request)` would give: bit for bit on the CPU backends and on Vulkan (there
  // but where a double sum taken in another order lands on the other side of an f32 rounding
  // boundary: docs/vulkan.md, "Batched decode"); a step that
  // fails gets its `error` and leaves its context's caches as a failed Forward does. The contexts
  // must not be in use elsewhere. The default evaluates the steps one after another.
  virtual void ForwardBatch(std::span<BatchStep> steps);
  // Whether ForwardBatch is faster than the steps one by one (the runtime batches only then).
  virtual bool batches_steps() const { return false; }
  // Whether ForwardBatch also takes steps of several tokens that return every position's output
  // (all_positions: speculative verification steps), each row as the context's own Forward gives
  // it (as ForwardBatch's one-token steps).
  virtual bool batches_multi_token_steps() const { return false; }
};

std::shared_ptr<BackendModel> CreateCpuReferenceModel(const Model& model);
// Convenience for tests and tools: a model with one context (the context keeps the model alive).
std::unique_ptr<Backend> CreateCpuReferenceBackend(const Model& model,
                                                   const BackendOptions& options);

}  // namespace gemma
