// Video frames through the ffmpeg tool: frames written here, encoded losslessly by ffmpeg (FFV1),
// decoded back by frame number (transformers' uniform sampling, its fps rule); the frame limit; a
// clear error without ffmpeg. tests/video_golden_test.cc checks the rule against transformers.
#include "media/video.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

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

TEST(Video, ShortClipsGiveEveryFrameTheFpsRuleFewer) {
  if (!HaveFfmpeg()) GTEST_SKIP() << "ffmpeg is not installed";
  const std::string clip = MakeClip("a", 12, 4, 64, 48);  // 3 s at 4 fps
  VideoFrames v = DecodeVideo(clip);  // fewer frames than max_frames: all of them
  ASSERT_EQ(v.frames.size(), 12u);
  EXPECT_EQ(v.total_frames, 12);
  EXPECT_DOUBLE_EQ(v.video_fps, 4.0);
  EXPECT_DOUBLE_EQ(v.timestamps[5], 1.25);
  EXPECT_EQ(v.frames[5].rgb, Frame(5, 64, 48));
  v = DecodeVideo(clip, {.fps = 1});  // int(12 / 4 * 1) = 3 frames: 0, 4, 8
  ASSERT_EQ(v.frames.size(), 3u);
  for (size_t i = 0; i < v.frames.size(); ++i) {
    EXPECT_EQ(v.indices[i], static_cast<int>(4 * i));
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
  EXPECT_EQ(v.indices, (std::vector<int>{0, 5, 10, 15}));
  EXPECT_DOUBLE_EQ(v.timestamps[1], 2.5);
  EXPECT_EQ(v.frames[3].rgb, Frame(15, 32, 32));
  EXPECT_EQ(VideoTimestamp(v.timestamps[3]), "00:07");
  EXPECT_EQ(VideoTimestamp(75.9), "01:15");
}

// The arithmetic of torch.arange(0, total, total / n).int() and int(total / fps * wanted_fps),
// worked by hand.
TEST(Video, SampleFrameIndices) {
  EXPECT_EQ(SampleFrameIndices(35, 10, {.max_frames = 4}), (std::vector<int>{0, 8, 17, 26}));
  const std::vector<int> d = SampleFrameIndices(35, 10, {});  // 32 of 35: k * 1.09375
  ASSERT_EQ(d.size(), 32u);
  EXPECT_EQ(d[1], 1);
  EXPECT_EQ(d[10], 10);
  EXPECT_EQ(d[11], 12);  // 12.03125
  EXPECT_EQ(d[31], 33);  // 33.90625
  EXPECT_EQ(SampleFrameIndices(10, 1, {.max_frames = 3}), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(SampleFrameIndices(16, 8, {}).size(), 16u);                         // every frame
  EXPECT_EQ(SampleFrameIndices(175, 25, {.fps = 1}).size(), 7u);                // int(7.0)
  EXPECT_EQ(SampleFrameIndices(1199, 30000.0 / 1001, {.fps = 1}).size(), 32u);  // 40 -> max 32
  EXPECT_EQ(SampleFrameIndices(1199, 30000.0 / 1001, {.fps = 0.5, .max_frames = 100}).size(),
            20u);  // int(1199 / 29.97 * 0.5) = int(20.003)
  EXPECT_TRUE(SampleFrameIndices(0, 25, {}).empty());
  EXPECT_FLOAT_EQ(static_cast<float>(FrameTimestamp(299, 30000.0 / 1001)), 299.0f / 29.97003f);
}

// An upload's bytes decode as the file does (frames, numbers, times); the temporary file is gone
// afterwards, on success and on failure; errors name the caller's origin, not the temporary file.
TEST(Video, BytesDecodeLikeTheFile) {
  if (!HaveFfmpeg()) GTEST_SKIP() << "ffmpeg is not installed";
  const std::string clip = MakeClip("bytes", 12, 6, 32, 24);
  std::ifstream in(clip, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  const VideoFrames want = DecodeVideo(clip, {.max_frames = 5});
  const fs::path tmp = fs::temp_directory_path() / ("gemma_video_tmp_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  const char* old_tmp = std::getenv("TMPDIR");
  const std::string saved = old_tmp ? old_tmp : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  const VideoFrames got = DecodeVideoBytes(bytes, "upload", {.max_frames = 5});
  EXPECT_TRUE(fs::is_empty(tmp));
  ASSERT_EQ(got.frames.size(), want.frames.size());
  for (size_t k = 0; k < got.frames.size(); ++k)
    EXPECT_EQ(got.frames[k].rgb, want.frames[k].rgb) << k;
  EXPECT_EQ(got.indices, want.indices);
  EXPECT_EQ(got.timestamps, want.timestamps);
  EXPECT_EQ(got.total_frames, 12);
  const std::vector<uint8_t> junk(5000, 'x');
  try {
    DecodeVideoBytes(junk, "messages[0].content[1]");
    ADD_FAILURE() << "junk decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat) << e.what();
    EXPECT_NE(std::string(e.what()).find("messages[0].content[1]"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("gemma-video-"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(tmp));
  EXPECT_THROW(DecodeVideoBytes({}, "empty"), Error);
  if (old_tmp)
    setenv("TMPDIR", saved.c_str(), 1);
  else
    unsetenv("TMPDIR");
  fs::remove_all(tmp);
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
