#include "decode/stop_matcher.h"

#include <algorithm>

#include "gemma/error.h"

namespace gemma::decode {

StopMatcher::StopMatcher(std::vector<int32_t> stop_ids, std::vector<std::string> stop_strings)
    : stop_ids_(std::move(stop_ids)), stop_strings_(std::move(stop_strings)) {
  for (int32_t id : stop_ids_) {
    if (id < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "sampling option stop_ids: token id " + std::to_string(id) + " is negative");
    }
  }
  size_t longest = 0;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    if (stop_strings_[i].empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "sampling option stop_strings: entry " + std::to_string(i) + " is empty");
    }
    longest = std::max(longest, stop_strings_[i].size());
  }
  held_.reserve(2 * longest + 64);
}

bool StopMatcher::IsStopId(int32_t token) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end();
}

StopEvent StopMatcher::Push(int32_t token, std::string_view text, std::string* out) {
  if (event_.stopped()) return event_;
  auto it = std::find(stop_ids_.begin(), stop_ids_.end(), token);
  if (it != stop_ids_.end()) {
    out->append(held_);
    held_.clear();
    event_ = {StopKind::kStopId, static_cast<int32_t>(it - stop_ids_.begin())};
    return event_;
  }
  return PushText(text, out);
}

StopEvent StopMatcher::PushText(std::string_view text, std::string* out) {
  if (event_.stopped()) return event_;
  held_.append(text);
  const std::string_view buf = held_;

  // The match that completes first; among those ending together, the one starting first (the
  // longer). This does not depend on how the text was split into pushes.
  size_t best_end = std::string_view::npos;
  size_t best_pos = 0;
  int32_t best = -1;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t pos = buf.find(stop_strings_[i]);
    if (pos == std::string_view::npos) continue;
    const size_t end = pos + stop_strings_[i].size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_end = end;
      best_pos = pos;
      best = static_cast<int32_t>(i);
    }
  }
  if (best >= 0) {
    out->append(buf.substr(0, best_pos));
    held_.clear();
    event_ = {StopKind::kStopString, best};
    return event_;
  }

  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t keep_from = buf.size();
  for (const std::string& s : stop_strings_) {
    for (size_t len = std::min(s.size() - 1, buf.size()); len > 0; --len) {
      if (buf.size() - len >= keep_from) break;  // a longer hold-back is already known
      if (buf.substr(buf.size() - len) == std::string_view(s).substr(0, len)) {
        keep_from = buf.size() - len;
        break;
      }
    }
  }
  out->append(buf.substr(0, keep_from));
  held_.erase(0, keep_from);
  return event_;
}

void StopMatcher::Finish(std::string* out) {
  if (event_.stopped()) return;
  out->append(held_);
  held_.clear();
}

}  // namespace gemma::decode
