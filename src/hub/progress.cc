#include "hub/progress.h"

#include <unistd.h>

#include <algorithm>

namespace gemma::hub {

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

ConsoleProgress::ConsoleProgress(FILE* out) : out_(out), tty_(::isatty(::fileno(out)) == 1) {}

void ConsoleProgress::operator()(const TransferProgress& p) {
  const auto now = std::chrono::steady_clock::now();
  if (p.file != file_) {
    file_ = p.file;
    start_ = now;
    start_bytes_ = p.resumed;
    last_quarter_ = -1;
    if (!tty_) {
      std::fprintf(out_, "pull: %s (%s%s)\n", p.file.c_str(), HumanBytes(p.total).c_str(),
                   p.resumed ? (", resuming at " + HumanBytes(p.resumed)).c_str() : "");
    }
  }
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? (p.done - start_bytes_) / secs : 0;
  const double frac = p.total ? static_cast<double>(p.done) / p.total : 1.0;
  if (tty_) {
    constexpr int kWidth = 24;
    std::string bar(kWidth, ' ');
    for (int i = 0; i < static_cast<int>(frac * kWidth) && i < kWidth; ++i) bar[i] = '#';
    char eta[32] = "--:--";
    if (rate > 0 && p.done < p.total) {
      const long s = static_cast<long>((p.total - p.done) / rate);
      std::snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
    }
    std::fprintf(out_, "\r%-40.40s [%s] %5.1f%% %s/%s %s/s ETA %s\033[K", p.file.c_str(),
                 bar.c_str(), 100 * frac, HumanBytes(p.done).c_str(), HumanBytes(p.total).c_str(),
                 HumanBytes(rate).c_str(), eta);
    if (p.finished) std::fprintf(out_, "\n");
  } else {
    const int quarter = static_cast<int>(frac * 4);
    if (p.finished) {
      std::fprintf(out_, "pull: %s %s in %.1f s (%s/s)\n", p.file.c_str(),
                   p.done == p.total ? "done" : "stopped", secs, HumanBytes(rate).c_str());
    } else if (quarter > last_quarter_ && quarter < 4 && quarter > 0) {
      std::fprintf(out_, "pull: %s %d%% (%s/s)\n", p.file.c_str(), quarter * 25,
                   HumanBytes(rate).c_str());
    }
    last_quarter_ = std::max(last_quarter_, quarter);
  }
  std::fflush(out_);
}

}  // namespace gemma::hub
