// The engine's internals shared by engine.cc (loading, prompts, constraints) and session.cc (the
// generation loop): one loaded checkpoint, tokenizer and backend model per engine; sessions take a
// backend context each.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "constrain/constraint.h"
#include "gemma/engine.h"
#include "media/audio_features.h"
#include "media/image_processor.h"
#include "model/model.h"
#include "runtime/step_batcher.h"
#include "tokenizer/tokenizer.h"

namespace gemma {

// An image, video frame or audio clip of a prepared prompt: its patches (or log-mel chunks) and
// where its soft tokens sit in the ids. For audio, `patched` carries only soft_tokens and digest
// (the identity prefix reuse compares) and `audio` the features.
struct PreparedImage {
  media::PatchedImage patched;
  std::shared_ptr<const media::PreparedAudio> audio;
  int begin = 0;  // index of the first soft token (after <boi> / <boa>)
};

// A request's prompt: ids with image runs expanded, and the images that fill them.
struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::vector<PreparedImage> images;
  double prepare_ms = 0;  // media decoding and preprocessing (Telemetry::media_ms)
};

class EngineImpl : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& options);

  std::unique_ptr<Session> NewSession() override;
  bool has_tokenizer() const override { return tokenizer_ != nullptr; }
  int context_capacity() const override { return capacity_; }
  std::string backend_name() const override { return backend_name_; }
  std::string backend_device() const override { return backend_model_->device(); }
  bool backend_device_is_cpu() const override { return backend_model_->software_device(); }
  double load_ms() const override { return load_ms_; }
  int vocab_size() const override { return model_->text().vocab_size; }
  bool has_draft_model() const override { return draft_backend_ != nullptr; }
  bool has_vision() const override { return model_->vision() != nullptr; }
  bool has_audio() const override { return model_->audio() != nullptr; }
  // (the draft model's included)
  size_t shared_bytes() const override {
    return backend_model_->shared_bytes() + (draft_backend_ ? draft_backend_->shared_bytes() : 0);
  }
  size_t device_memory_bytes() const override {
    return backend_model_->device_memory_bytes() +
           (draft_backend_ ? draft_backend_->device_memory_bytes() : 0);
  }
  std::vector<int32_t> Tokenize(std::string_view text) const override;
  std::string Detokenize(const std::vector<int32_t>& ids) const override;
  std::vector<int32_t> PromptTokens(const Input& input) const override;
  // PromptTokens plus the images, decoded and preprocessed (Error for bad images or a count of
  // placeholders that does not match the images).
  PreparedPrompt Prepare(const Input& input) const;
  // The rendered and tokenized prompt before image runs are expanded.
  // `rewrite` (text and messages input) transforms the prompt text before tokenizing.
  std::vector<int32_t> RawPromptTokens(
      const Input& input, const std::function<std::string(const std::string&)>& rewrite = {}) const;
  std::string PromptText(const Input& input) const override;
  GenerateOptions DefaultGenerateOptions() const override { return defaults_; }
  ChatTemplateInfo chat_template_info() const override { return template_info_; }

  const Tokenizer& tokenizer() const;  // Error(kTokenizer) without one
  const Model& model() const { return *model_; }
  BackendModel& backend_model() const { return *backend_model_; }
  // Batched decode across sessions; null when off (EngineOptions::max_batch 1, or a backend that
  // does not gain from it).
  StepBatcher* batcher() const { return batcher_.get(); }
  // A context of the draft model (has_draft_model()) holding up to `capacity` tokens.
  std::unique_ptr<Backend> NewDraftContext(int capacity) const;
  // The draft model (null without one) and the capacity of a draft context for a session of
  // `capacity` tokens.
  const Model* draft_model() const { return draft_model_.get(); }
  // Batched draft steps across drafting sessions (null where the draft backend does not gain from
  // it), and whether its batches take steps of several tokens.
  StepBatcher* draft_batcher() const { return draft_batcher_.get(); }
  bool draft_batches_multi_token_steps() const {
    return draft_backend_ && draft_backend_->batches_multi_token_steps();
  }
  int DraftCapacity(int capacity) const;
  // Whether sessions' caches live in host memory sized by PlanCpuContextBytes (the CPU backends):
  // requests then check the memory they would add before the caches grow.
  bool host_memory_checks() const { return host_memory_checks_; }
  // Null for OutputConstraint::Kind::kNone; Error(kConstraint / kInvalidArgument) when it cannot
  // be compiled.
  std::shared_ptr<const constrain::Constraint> CompileConstraint(
      const OutputConstraint& oc, const Input& input, const std::vector<int>& stop_ids) const;

 private:
  // The token -> bytes table for constraints, built once on first use.
  std::shared_ptr<const constrain::Vocabulary> vocabulary() const;

  EngineOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<BackendModel> backend_model_;
  // The draft model, when EngineOptions::draft_model_path is set.
  std::unique_ptr<Model> draft_model_;
  std::shared_ptr<BackendModel> draft_backend_;
  std::unique_ptr<StepBatcher> draft_batcher_;  // drafting sessions' draft steps, batched
  // The draft model's checkpoint, checked against the model's vocabulary and tokenizer; then its
  // backend, beside the model's.
  void LoadDraftModel(const EngineOptions& options, const std::string& tokenizer_path);
  void StartDraftBackend(const EngineOptions& options);
  mutable std::once_flag vocab_once_;
  mutable std::shared_ptr<const constrain::Vocabulary> vocab_;
  std::unique_ptr<StepBatcher> batcher_;
  std::unique_ptr<Backend> first_context_;  // made at load so a bad device fails there
  std::mutex first_context_mutex_;
  std::string backend_name_;
  int capacity_ = 0;
  bool host_memory_checks_ = false;
  // Error(kCapacity) with the bytes when one CPU context at capacity_ (and, with a draft model,
  // one draft context beside it) would not fit in memory.
  void CheckHostMemory(const EngineOptions& options) const;
  double load_ms_ = 0;
  GenerateOptions defaults_;
  ChatTemplateInfo template_info_;
};

// A session over one backend context of `engine` (session.cc).
std::unique_ptr<Session> NewSessionImpl(std::shared_ptr<const EngineImpl> engine,
                                        std::unique_ptr<Backend> context);

}  // namespace gemma
