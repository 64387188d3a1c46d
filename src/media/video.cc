#include "media/video.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "gemma/error.h"

extern char** environ;

namespace gemma::media {
namespace {

struct Child {
  int status = -1;
  std::string out, err;
};

// Runs argv[0] (PATH lookup) with stdin from /dev/null; collects stdout and stderr. `missing` is
// set when the program does not exist.
Child RunTool(const std::vector<std::string>& args, bool* missing) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0)
    throw Error(ErrorCode::kIo, "video: cannot create a pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
  posix_spawn_file_actions_addclose(&fa, err_pipe[0]);
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  Child c;
  *missing = rc == ENOENT;
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (*missing) return c;
    throw Error(ErrorCode::kIo, "video: cannot run " + args[0] + ": " + std::strerror(rc));
  }
  // Drain both pipes (stderr is small; read it after stdout closes, with a bounded buffer).
  char buf[1 << 16];
  for (ssize_t n; (n = read(out_pipe[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    c.out.append(buf, static_cast<size_t>(n));
  }
  for (ssize_t n; (n = read(err_pipe[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (c.err.size() < (1u << 20)) c.err.append(buf, static_cast<size_t>(n));
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return c;
}

// The last non-empty line (ffmpeg's reason for failing).
std::string LastLine(const std::string& s) {
  size_t e = s.find_last_not_of("\r\n ");
  if (e == std::string::npos) return "(no message)";
  const size_t b = s.find_last_of("\n", e);
  return s.substr(b == std::string::npos ? 0 : b + 1, e + 1 - (b == std::string::npos ? 0 : b + 1));
}

}  // namespace

VideoFrames DecodeVideo(const std::string& path, const VideoOptions& o) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(ErrorCode::kIo, path + ": no such file");
  if (!(o.fps > 0) || o.max_frames < 1)
    throw Error(ErrorCode::kInvalidArgument, "video: fps must be > 0 and max_frames >= 1");
  bool missing = false;
  double fps = o.fps;
  // The duration decides whether 1 frame per second fits the frame limit.
  const Child probe = RunTool({o.ffprobe, "-v", "error", "-show_entries", "format=duration", "-of",
                               "default=noprint_wrappers=1:nokey=1", path},
                              &missing);
  if (!missing && probe.status == 0) {
    const double duration = std::atof(probe.out.c_str());
    if (duration * fps > o.max_frames) fps = o.max_frames / duration;
  }
  // The first frame, then the first frame at least 1 / fps after the last one taken (as
  // transformers' frame indices pick the first frame of each interval); showinfo reports each
  // taken frame's time.
  char filter[160];
  std::snprintf(filter, sizeof filter,
                "select='isnan(prev_selected_t)+gte(t-prev_selected_t\\,%.9g)',showinfo",
                1.0 / fps);
  const Child c = RunTool(
      {o.ffmpeg, "-nostdin", "-hide_banner", "-v", "info", "-i", path, "-vf", filter, "-fps_mode",
       "vfr", "-frames:v", std::to_string(o.max_frames), "-f", "image2pipe", "-vcodec", "ppm", "-"},
      &missing);
  if (missing) {
    throw Error(ErrorCode::kUnsupported,
                "video input needs the ffmpeg command, which is not installed (Debian: apt-get "
                "install ffmpeg)");
  }
  if (c.status != 0)
    throw Error(ErrorCode::kFormat, path + ": ffmpeg cannot decode it: " + LastLine(c.err));
  VideoFrames v;
  std::vector<double> times;
  for (size_t at = 0; (at = c.err.find("pts_time:", at)) != std::string::npos; at += 9)
    times.push_back(std::atof(c.err.c_str() + at + 9));
  size_t p = 0;
  const std::string& s = c.out;
  auto token = [&]() {
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
    size_t b = p;
    while (p < s.size() && !std::isspace(static_cast<unsigned char>(s[p]))) ++p;
    return s.substr(b, p - b);
  };
  while (p < s.size()) {
    if (token() != "P6")
      throw Error(ErrorCode::kFormat, path + ": unexpected frame data from ffmpeg");
    const int64_t w = std::atoll(token().c_str()), h = std::atoll(token().c_str());
    const int maxval = std::atoi(token().c_str());
    ++p;  // the single whitespace before the pixels
    if (w <= 0 || h <= 0 || maxval != 255)
      throw Error(ErrorCode::kFormat, path + ": unexpected frame header from ffmpeg");
    if (w * h > o.max_pixels)
      throw Error(ErrorCode::kCapacity, path + ": frames of " + std::to_string(w) + "x" +
                                            std::to_string(h) + " exceed the pixel limit");
    const size_t bytes = static_cast<size_t>(w * h * 3);
    if (p + bytes > s.size())
      throw Error(ErrorCode::kFormat, path + ": truncated frame from ffmpeg");
    Image img;
    img.width = static_cast<int>(w);
    img.height = static_cast<int>(h);
    img.rgb.assign(s.begin() + static_cast<std::ptrdiff_t>(p),
                   s.begin() + static_cast<std::ptrdiff_t>(p + bytes));
    p += bytes;
    const size_t k = v.frames.size();
    v.timestamps.push_back(k < times.size() ? times[k] : static_cast<double>(k) / fps);
    v.frames.push_back(std::move(img));
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
  }
  if (v.frames.empty()) throw Error(ErrorCode::kFormat, path + ": no video frames");
  return v;
}

}  // namespace gemma::media
