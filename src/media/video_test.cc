// Video frames through the ffmpeg tool: frames written here, encoded losslessly by ffmpeg (FFV1),
// decoded back at 1 frame per second; the frame limit; a clear error without ffmpeg.
#include "media/video.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gemma/error.h"

namespace gemma::media {
namespace {

namespace fs = std::filesystem;

bool HaveFfmpeg() { return std::system("ffmpeg -version > /dev/null 2>&1") == 0; }

// Frame k of a w x h clip: a colour that encodes k, plus a gradient.
std::vector<uint8_t> Frame(int k, int w, int h) {
  std::vector<uint8_t> f(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &f[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(k * 9);
      p[1] = static_cast<uint8_t>(x * 3);
      p[2] = static_cast<uint8_t>(y * 5);
    }
  return f;
}

// A lossless clip of `frames` frames at `rate` fps; returns its path.
std::string MakeClip(const std::string& name, int frames, int rate, int w, int h) {
  const fs::path dir = fs::temp_directory_path() / ("gemma_video_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string raw = (dir / (name + ".rgb")).string(), out = (dir / (name + ".mkv")).string();
  {
    std::ofstream f(raw, std::ios::binary);
    for (int k = 0; k < frames; ++k) {
      const auto fr = Frame(k, w, h);
      f.write(reinterpret_cast<const char*>(fr.data()), static_cast<std::streamsize>(fr.size()));
    }
  }
  const std::string cmd = "ffmpeg -nostdin -v error -y -f rawvideo -pix_fmt rgb24 -s " +
                          std::to_string(w) + "x" + std::to_string(h) + " -r " +
                          std::to_string(rate) + " -i " + raw + " -c:v ffv1 -pix_fmt bgr0 " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return out;
}

TEST(Video, OneFramePerSecondWithTimestamps) {
  if (!HaveFfmpeg()) GTEST_SKIP() << "ffmpeg is not installed";
  const std::string clip = MakeClip("a", 12, 4, 64, 48);  // 3 s at 4 fps
  const VideoFrames v = DecodeVideo(clip);
  ASSERT_EQ(v.frames.size(), 3u);
  for (size_t i = 0; i < v.frames.size(); ++i) {
    EXPECT_DOUBLE_EQ(v.timestamps[i], static_cast<double>(i));
    EXPECT_EQ(v.frames[i].width, 64);
    EXPECT_EQ(v.frames[i].height, 48);
    EXPECT_EQ(v.frames[i].rgb, Frame(static_cast<int>(4 * i), 64, 48)) << "second " << i;
  }
}

TEST(Video, LongVideosAreSampledUnderTheFrameLimit) {
  if (!HaveFfmpeg()) GTEST_SKIP() << "ffmpeg is not installed";
  const std::string clip = MakeClip("b", 20, 2, 32, 32);  // 10 s at 2 fps
  const VideoFrames v = DecodeVideo(clip, {.max_frames = 4});
  ASSERT_EQ(v.frames.size(), 4u);
  EXPECT_DOUBLE_EQ(v.timestamps[1], 2.5);
  EXPECT_EQ(VideoTimestamp(v.timestamps[3]), "00:07");
  EXPECT_EQ(VideoTimestamp(75.9), "01:15");
}

TEST(Video, ErrorsAreTyped) {
  try {
    const std::string clip = (fs::temp_directory_path() / "gemma_video_err.mkv").string();
    std::ofstream(clip) << "not a video at all";
    DecodeVideo(clip, {.ffmpeg = "gemma-no-such-ffmpeg", .ffprobe = "gemma-no-such-ffprobe"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("ffmpeg"), std::string::npos);
  }
  EXPECT_THROW(DecodeVideo("/nonexistent/clip.mp4"), Error);
  if (!HaveFfmpeg()) return;
  const std::string bad = (fs::temp_directory_path() / "gemma_video_bad.mp4").string();
  std::ofstream(bad) << std::string(5000, 'x');
  try {
    DecodeVideo(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat) << e.what();
  }
}

}  // namespace
}  // namespace gemma::media
