// Typed errors of the Hub client. Each is a gemma::Error (so the CLI prints one line and exits 2)
// with a finer kind that callers and tests can branch on, and a message that says what to do.
#pragma once

#include <string>

#include "gemma/error.h"

namespace gemma::hub {

enum class HubErrorKind {
  kNotFound,    // 404: no such repository, revision or file
  kGated,       // 401/403: gated or private; needs a token and/or accepting the license
  kOffline,     // HF_HUB_OFFLINE or no network, and the cache cannot answer
  kDiskFull,    // not enough free space (checked before) or ENOSPC while writing
  kChecksum,    // the bytes do not hash to the Hub's oid, even after one refetch
  kCancelled,   // the caller cancelled; the partial file is kept for resume
  kNetwork,     // transfer failed after all retries, or a malformed API answer
  kInvalidSpec  // not ORG/NAME[@REV]
};

class HubError : public Error {
 public:
  HubError(HubErrorKind kind, const std::string& message)
      : Error(CodeFor(kind), message), kind_(kind) {}
  HubErrorKind kind() const noexcept { return kind_; }

 private:
  static ErrorCode CodeFor(HubErrorKind k) {
    switch (k) {
      case HubErrorKind::kCancelled:
        return ErrorCode::kCancelled;
      case HubErrorKind::kInvalidSpec:
        return ErrorCode::kInvalidArgument;
      case HubErrorKind::kChecksum:
        return ErrorCode::kFormat;
      case HubErrorKind::kDiskFull:
        return ErrorCode::kCapacity;
      default:
        return ErrorCode::kIo;
    }
  }
  HubErrorKind kind_;
};

}  // namespace gemma::hub
