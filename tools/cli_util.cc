#include "cli_util.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>

namespace gemma::cli {

std::string Utf8Problem(std::string_view s) {
  const size_t bad = InvalidUtf8Offset(s);
  if (bad == std::string_view::npos) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "not valid UTF-8 at byte %zu (0x%02X)", bad,
                static_cast<unsigned char>(s[bad]));
  return buf;
}

namespace {
std::stop_source* g_stop = nullptr;
void OnSigint(int) {
  if (g_stop) g_stop->request_stop();
}
}  // namespace

void InstallSigint() {
  struct sigaction sa {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read returns, so the prompt can be redrawn
  sigaction(SIGINT, &sa, nullptr);
}

void SetCancelTarget(std::stop_source* stop) { g_stop = stop; }

ReadStatus ReadLine(std::FILE* in, std::string* line) {
  line->clear();
  while (true) {
    const int c = std::fgetc(in);
    if (c == EOF) {
      if (std::ferror(in) && errno == EINTR) {
        // Ctrl-C at the prompt: stdio reports it as an error, not as the end of input (the old
        // std::getline treated both as EOF and quit, losing the chat).
        std::clearerr(in);
        line->clear();
        return ReadStatus::kInterrupted;
      }
      if (!line->empty()) return ReadStatus::kLine;  // a last line without newline
      return ReadStatus::kEof;
    }
    if (c == '\n') return ReadStatus::kLine;
    line->push_back(static_cast<char>(c));
  }
}

bool StdinIsTerminal() { return ::isatty(STDIN_FILENO) == 1; }

void Stream(const TokenEvent& ev) {
  std::fwrite(ev.delta.data(), 1, ev.delta.size(), stdout);
  std::fflush(stdout);
}

nlohmann::json UserContent(const std::string& text, const std::vector<std::string>& images,
                           const std::vector<std::string>& videos,
                           const std::vector<std::string>& audios) {
  if (images.empty() && videos.empty() && audios.empty()) return text;
  nlohmann::json parts = nlohmann::json::array();
  for (const std::string& f : images) parts.push_back({{"type", "image"}, {"path", f}});
  for (const std::string& f : videos) parts.push_back({{"type", "video"}, {"path", f}});
  for (const std::string& f : audios) parts.push_back({{"type", "audio"}, {"path", f}});
  parts.push_back({{"type", "text"}, {"text", text}});
  return parts;
}

void PrintTelemetry(const Result& r) {
  const Telemetry& t = r.telemetry;
  std::fprintf(
      stderr,
      "[%s] stop: %s | prompt %d (reused %d) | TTFT %.1f ms | prefill %.1f ms | %zu tokens, "
      "decode %.2f tok/s, ITL p50 %.1f / p95 %.1f ms | RSS %.0f MiB\n",
      t.backend.c_str(), StopReasonName(r.stop_reason), t.prompt_tokens, t.reused_tokens, t.ttft_ms,
      t.prefill_ms, r.tokens.size(), t.decode_tok_s, t.itl_median_ms, t.itl_p95_ms,
      t.resident_bytes / 1048576.0);
  if (t.images > 0) {
    std::fprintf(stderr,
                 "[vision] %d image%s, %d through the tower (%d reused) | tower %.1f ms, media "
                 "decoding and preprocessing %.1f ms\n",
                 t.images, t.images == 1 ? "" : "s", t.images_encoded, t.images - t.images_encoded,
                 t.vision_ms, t.media_ms);
  }
  if (t.verify_steps > 0) {
    std::fprintf(stderr, "[speculative] %d verification steps, %d drafted, %d accepted",
                 t.verify_steps, t.drafted, t.accepted);
    if (t.draft_ms > 0) std::fprintf(stderr, " | draft model %.1f ms", t.draft_ms);
    std::fprintf(stderr, "\n");
  }
  if (t.audios > 0) {
    std::fprintf(stderr, "[audio] %d clip%s, %d through the tower (%d reused) | tower %.1f ms",
                 t.audios, t.audios == 1 ? "" : "s", t.audios_encoded, t.audios - t.audios_encoded,
                 t.audio_ms);
    // (the media's decoding time once: on the [vision] line where there are images)
    if (t.images == 0) std::fprintf(stderr, ", decoding and features %.1f ms", t.media_ms);
    std::fprintf(stderr, "\n");
  }
}


void WarnIfIncomplete(const GenerateOptions& g, const Result& r) {
  if (ConstraintComplete(g, r)) return;
  std::fprintf(stderr,
               "warning: the output is incomplete for its constraint (stopped by %s after %zu "
               "tokens%s)\n",
               StopReasonName(r.stop_reason), r.tokens.size(),
               r.stop_reason == StopReason::kLength ? "; raise -n" : "");
}

}  // namespace gemma::cli
