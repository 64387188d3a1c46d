// Stop ids and stop strings over streamed text.
//
// The matcher holds back the longest suffix of the not-yet-emitted text that is a proper prefix of
// some stop string, so a stop string never leaks into emitted text even when it spans tokens. When
// the text contains a stop string, the match that ends first wins (among matches ending together,
// the one that starts first), the text before it is emitted and everything from it on is dropped.
// So the result is the same however the text is split into pushes, as if fed byte by byte. A stop
// id ends
// the stream too: held text is released (it can no longer become a stop string) and the stop
// token's own text is dropped. After a stop, pushes emit nothing and report the same stop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "decode/sampling_options.h"

namespace gemma::decode {

enum class StopKind { kNone, kStopId, kStopString };

struct StopEvent {
  StopKind kind = StopKind::kNone;
  int32_t index = -1;  // into stop_ids or stop_strings
  bool stopped() const { return kind != StopKind::kNone; }
};

class StopMatcher {
 public:
  // Throws gemma::Error(kInvalidArgument) on an empty stop string or a negative id.
  StopMatcher(std::vector<int32_t> stop_ids, std::vector<std::string> stop_strings);
  explicit StopMatcher(const SamplingOptions& options)
      : StopMatcher(options.stop_ids, options.stop_strings) {}

  // One generated token and its decoded text: appends what is safe to emit to *out.
  StopEvent Push(int32_t token, std::string_view text, std::string* out);
  // Text without a token (e.g. a detokenizer flush).
  StopEvent PushText(std::string_view text, std::string* out);
  // End of generation without a stop (EOS handled elsewhere, max tokens): releases held text.
  void Finish(std::string* out);

  bool IsStopId(int32_t token) const;
  const StopEvent& event() const { return event_; }
  std::string_view held() const { return held_; }

 private:
  std::vector<int32_t> stop_ids_;
  std::vector<std::string> stop_strings_;
  std::string held_;
  StopEvent event_;
};

}  // namespace gemma::decode
