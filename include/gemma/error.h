// Typed errors for bad input. Every failure a user can cause (a file, a config, a request, a
// schema) surfaces as gemma::Error with a code and a message that says what was wrong and where.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace gemma {

enum class ErrorCode {
  kInvalidArgument,  // a request or option that makes no sense
  kIo,               // a file could not be opened, read or mapped
  kFormat,           // a file's bytes are malformed (header, JSON, offsets, dtypes)
  kConfig,           // a config value is missing, wrong or unsupported
  kMissingTensor,    // a tensor the model needs is not in the checkpoint
  kShape,            // a tensor's dtype or shape disagrees with the config
  kUnsupported,      // valid input that this engine does not implement
  kCapacity,         // context or resource limits exceeded
  kCancelled,        // the caller cancelled the request
  kCallback,         // a user callback threw
  kTokenizer,        // tokenizer file or input problems
  kTemplate,         // chat messages that the template cannot render
  kConstraint,       // a regex/schema/grammar that cannot be compiled, or a dead end
  kDevice,           // a backend device failed (device lost, out of memory)
  kBusy,             // the session is already running a request on another thread
  kInternal,         // a broken invariant; a bug
};

// Stable lower-case name of a code, e.g. "missing_tensor".
std::string_view ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(ErrorCodeName(code)) + ": " + message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace gemma
