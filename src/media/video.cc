#include "media/video.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>

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

// The tool's reason for failing, with `path` (a temporary file's name) written as `origin`.
std::string Reason(const Child& c, const std::string& path, const std::string& origin) {
  std::string r = LastLine(c.err);
  if (path == origin) return r;
  for (size_t at = r.find(path); at != std::string::npos; at = r.find(path, at + origin.size()))
    r.replace(at, path.size(), origin);
  return r;
}

// ffprobe's "key=value" lines for the first video stream.
std::string ProbeField(const std::string& out, const std::string& key) {
  const std::string k = key + "=";
  for (size_t at = 0; at < out.size();) {
    size_t e = out.find('\n', at);
    if (e == std::string::npos) e = out.size();
    if (out.compare(at, k.size(), k) == 0) {
      std::string v = out.substr(at + k.size(), e - at - k.size());
      while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
      return v;
    }
    at = e + 1;
  }
  return {};
}

// "30000/1001" -> 29.97...; 0 for "0/0", "N/A" or nothing.
double ParseRate(const std::string& r) {
  const size_t slash = r.find('/');
  const double num = std::atof(r.c_str());
  if (slash == std::string::npos) return num > 0 ? num : 0;
  const double den = std::atof(r.c_str() + slash + 1);
  return num > 0 && den > 0 ? num / den : 0;
}

// (`origin` names the video in errors: its path, or what the caller calls an uploaded one.)
Child Probe(const VideoOptions& o, const std::string& path, const std::string& origin,
            std::vector<std::string> args) {
  std::vector<std::string> a = {o.ffprobe, "-v", "error", "-select_streams", "v:0"};
  a.insert(a.end(), args.begin(), args.end());
  a.insert(a.end(), {"-of", "default=noprint_wrappers=1", path});
  bool missing = false;
  Child c = RunTool(a, &missing);
  if (missing) {
    throw Error(ErrorCode::kUnsupported,
                "video input needs the ffmpeg and ffprobe commands, which are not installed "
                "(Debian: apt-get install ffmpeg)");
  }
  if (c.status != 0)
    throw Error(ErrorCode::kFormat,
                origin + ": ffprobe cannot read it: " + Reason(c, path, origin));
  return c;
}

// An ffmpeg expression true for the frame numbers idx[b, e) (sorted, distinct): runs of
// consecutive numbers as between(), joined by a balanced tree of sums (a flat sum of more than
// ~100 terms fails to parse).
std::string SelectExpression(const std::vector<int>& idx, size_t b, size_t e) {
  size_t run = b + 1;
  while (run < e && idx[run] == idx[run - 1] + 1) ++run;
  if (run == e) {
    return idx[b] == idx[e - 1]
               ? "eq(n\\," + std::to_string(idx[b]) + ")"
               : "between(n\\," + std::to_string(idx[b]) + "\\," + std::to_string(idx[e - 1]) + ")";
  }
  const size_t mid = std::max(run, b + (e - b) / 2);
  return "(" + SelectExpression(idx, b, mid) + "+" + SelectExpression(idx, mid, e) + ")";
}

}  // namespace

std::vector<int> SampleFrameIndices(int total_frames, double video_fps, const VideoOptions& o) {
  if (total_frames <= 0) return {};
  int n = o.max_frames;
  // transformers: int(total_num_frames / metadata.fps * fps), in double, truncated.
  if (o.fps > 0 && video_fps > 0)
    n = std::min(n, static_cast<int>(std::min(1e9, total_frames / video_fps * o.fps)));
  n = std::clamp(n, 1, total_frames);
  // torch.arange(0, total, step).int(): ceil(total / step) elements, element k = k * step in
  // double rounded to float32, then truncated toward zero.
  const double step = static_cast<double>(total_frames) / n;
  const int64_t count = static_cast<int64_t>(std::ceil(total_frames / step));
  std::vector<int> idx;
  for (int64_t k = 0; k < count; ++k) {
    const int i = static_cast<int>(static_cast<float>(static_cast<double>(k) * step));
    idx.push_back(std::min(i, total_frames - 1));
  }
  return idx;
}

double FrameTimestamp(int index, double video_fps) {
  return static_cast<double>(static_cast<float>(index) / static_cast<float>(video_fps));
}

namespace {

VideoFrames DecodeVideoAt(const std::string& path, const std::string& origin,
                          const VideoOptions& o) {
  if (o.fps < 0 || o.max_frames < 1)
    throw Error(ErrorCode::kInvalidArgument, "video: fps must be >= 0 and max_frames >= 1");
  // What PyAV tells transformers: the stream's frame count from the container (nb_frames) and its
  // average frame rate. Containers without a count (WebM, Matroska) are counted by decoding.
  VideoFrames v;
  const Child probe = Probe(o, path, origin, {"-show_entries", "stream=nb_frames,avg_frame_rate"});
  v.video_fps = ParseRate(ProbeField(probe.out, "avg_frame_rate"));
  if (!(v.video_fps > 0)) v.video_fps = 24;  // Gemma4Processor's default when the rate is unknown
  v.total_frames = std::atoi(ProbeField(probe.out, "nb_frames").c_str());
  if (v.total_frames <= 0) {
    const Child count =
        Probe(o, path, origin, {"-count_frames", "-show_entries", "stream=nb_read_frames"});
    v.total_frames = std::atoi(ProbeField(count.out, "nb_read_frames").c_str());
  }
  if (v.total_frames <= 0) throw Error(ErrorCode::kFormat, origin + ": no video frames");
  v.indices = SampleFrameIndices(v.total_frames, v.video_fps, o);
  // The chosen frames by number (`n` counts decoded frames as PyAV's enumerate(decode()) does),
  // every frame passed through as decoded (no frame-rate conversion), converted to RGB by swscale
  // as PyAV's to_ndarray(format="rgb24") converts them.
  std::vector<int> unique = v.indices;
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  const std::string select = "select='" + SelectExpression(unique, 0, unique.size()) + "'";
  bool missing = false;
  const Child c =
      RunTool({o.ffmpeg, "-nostdin",   "-hide_banner", "-v",        "error",
               "-i",     path,         "-map",         "0:v:0",     "-vf",
               select,   "-fps_mode",  "passthrough",  "-frames:v", std::to_string(unique.size()),
               "-f",     "image2pipe", "-vcodec",      "ppm",       "-"},
              &missing);
  if (missing) {
    throw Error(ErrorCode::kUnsupported,
                "video input needs the ffmpeg command, which is not installed (Debian: apt-get "
                "install ffmpeg)");
  }
  if (c.status != 0)
    throw Error(ErrorCode::kFormat,
                origin + ": ffmpeg cannot decode it: " + Reason(c, path, origin));
  std::vector<Image> decoded;
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
      throw Error(ErrorCode::kFormat, origin + ": unexpected frame data from ffmpeg");
    const int64_t w = std::atoll(token().c_str()), h = std::atoll(token().c_str());
    const int maxval = std::atoi(token().c_str());
    ++p;  // the single whitespace before the pixels
    if (w <= 0 || h <= 0 || maxval != 255)
      throw Error(ErrorCode::kFormat, origin + ": unexpected frame header from ffmpeg");
    if (w * h > o.max_pixels)
      throw Error(ErrorCode::kCapacity, origin + ": frames of " + std::to_string(w) + "x" +
                                            std::to_string(h) + " exceed the pixel limit");
    const size_t bytes = static_cast<size_t>(w * h * 3);
    if (p + bytes > s.size())
      throw Error(ErrorCode::kFormat, origin + ": truncated frame from ffmpeg");
    Image img;
    img.width = static_cast<int>(w);
    img.height = static_cast<int>(h);
    img.rgb.assign(s.begin() + static_cast<std::ptrdiff_t>(p),
                   s.begin() + static_cast<std::ptrdiff_t>(p + bytes));
    p += bytes;
    decoded.push_back(std::move(img));
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
  }
  if (decoded.empty()) throw Error(ErrorCode::kFormat, origin + ": no video frames");
  // A container that counts more frames than decode keeps the frames that exist.
  for (size_t k = 0, u = 0; k < v.indices.size(); ++k) {
    if (k > 0 && v.indices[k] != v.indices[k - 1]) ++u;
    if (u >= decoded.size()) {
      v.indices.resize(k);
      break;
    }
    v.frames.push_back(decoded[u]);
    v.timestamps.push_back(FrameTimestamp(v.indices[k], v.video_fps));
  }
  return v;
}

// A private temporary file (mode 0600, in $TMPDIR or /tmp), removed when it goes out of scope.
class TempFile {
 public:
  explicit TempFile(std::span<const uint8_t> bytes) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/gemma-video-XXXXXX";
    const int fd = mkstemp(path_.data());
    if (fd < 0) throw Error(ErrorCode::kIo, "video: cannot create a temporary file: " + Errno());
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const std::string why = Errno();
        close(fd);
        unlink(path_.c_str());
        throw Error(ErrorCode::kIo, "video: cannot write a temporary file: " + why);
      }
      done += static_cast<size_t>(n);
    }
    close(fd);
  }
  ~TempFile() { unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  static std::string Errno() { return std::strerror(errno); }
  std::string path_;
};

}  // namespace

VideoFrames DecodeVideo(const std::string& path, const VideoOptions& o) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(ErrorCode::kIo, path + ": no such file");
  return DecodeVideoAt(path, path, o);
}

VideoFrames DecodeVideoBytes(std::span<const uint8_t> bytes, const std::string& origin,
                             const VideoOptions& o) {
  if (bytes.empty()) throw Error(ErrorCode::kFormat, origin + ": no bytes");
  const TempFile file(bytes);
  return DecodeVideoAt(file.path(), origin, o);
}

}  // namespace gemma::media
