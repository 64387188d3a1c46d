// The engine's internals shared by engine.cc (loading, prompts, constraints) and session.cc (the
// generation loop): one loaded checkpoint, tokenizer and backend model per engine; sessions take a
// backend context each.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "constrain/constraint.h"
#include "gemma/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace gemma {

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
  size_t shared_bytes() const override { return backend_model_->shared_bytes(); }
  std::vector<int32_t> Tokenize(std::string_view text) const override;
  std::string Detokenize(const std::vector<int32_t>& ids) const override;
  std::vector<int32_t> PromptTokens(const Input& input) const override;
  std::string PromptText(const Input& input) const override;

  const Tokenizer& tokenizer() const;  // Error(kTokenizer) without one
  const Model& model() const { return *model_; }
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
  mutable std::once_flag vocab_once_;
  mutable std::shared_ptr<const constrain::Vocabulary> vocab_;
  std::unique_ptr<Backend> first_context_;  // made at load so a bad device fails there
  std::mutex first_context_mutex_;
  std::string backend_name_;
  int capacity_ = 0;
  double load_ms_ = 0;
};

// A session over one backend context of `engine` (session.cc).
std::unique_ptr<Session> NewSessionImpl(std::shared_ptr<const EngineImpl> engine,
                                        std::unique_ptr<Backend> context);

}  // namespace gemma
