#include "gemma/error.h"

namespace gemma {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kFormat:
      return "format";
    case ErrorCode::kConfig:
      return "config";
    case ErrorCode::kMissingTensor:
      return "missing_tensor";
    case ErrorCode::kShape:
      return "shape";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kCapacity:
      return "capacity";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kCallback:
      return "callback";
    case ErrorCode::kTokenizer:
      return "tokenizer";
    case ErrorCode::kTemplate:
      return "template";
    case ErrorCode::kConstraint:
      return "constraint";
    case ErrorCode::kDevice:
      return "device";
    case ErrorCode::kBusy:
      return "busy";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

}  // namespace gemma
