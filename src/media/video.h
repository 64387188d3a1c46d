// Video files -> frames, through the `ffmpeg` and `ffprobe` command-line tools run as subprocesses
// (the FFmpeg libraries' API churns between releases; the tools' flags do not, and a missing tool
// is a clear error instead of a link failure). Frames are chosen as transformers'
// Gemma4VideoProcessor chooses them (BaseVideoProcessor.sample_frames): `max_frames` (its
// num_frames, 32) spread uniformly over the whole video by frame number, and a frame's timestamp is
// its number divided by the stream's average frame rate (tests/video_golden_test.cc checks both
// against transformers).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "media/image.h"

namespace gemma::media {

struct VideoOptions {
  // > 0: int(frames / video fps * fps) frames (transformers' fps argument), at most max_frames.
  double fps = 0;
  int max_frames = 32;                    // transformers' num_frames
  std::string ffmpeg = "ffmpeg";          // looked up in PATH
  std::string ffprobe = "ffprobe";        // frame count and frame rate
  int64_t max_pixels = int64_t{1} << 26;  // per frame
};

struct VideoFrames {
  std::vector<Image> frames;
  std::vector<int> indices;        // frame numbers in decode order (0 = first frame)
  std::vector<double> timestamps;  // seconds
  int total_frames = 0;            // in the video
  double video_fps = 0;            // the stream's average frame rate (24 when it has none)
};

// Error(kUnsupported) when ffmpeg or ffprobe is not installed, Error(kFormat) when it cannot decode
// the file (its message included), Error(kIo) for a missing file, Error(kCapacity) for huge frames.
VideoFrames DecodeVideo(const std::string& path, const VideoOptions& options = {});
// The same from a video's bytes (an upload): written to a private temporary file (mode 0600, in
// $TMPDIR or /tmp) that ffprobe and ffmpeg read, removed afterwards; errors name `origin`.
VideoFrames DecodeVideoBytes(std::span<const uint8_t> bytes, const std::string& origin,
                             const VideoOptions& options = {});

// The frame numbers DecodeVideo takes from a video of `total_frames` frames at `video_fps`:
// floor(k * total / n) for k < n as torch.arange(0, total, total / n).int() computes it (double
// products rounded to float32, then truncated), n = max_frames or the fps rule, at most
// total_frames (transformers refuses a video with fewer frames than it wants; we take every frame).
std::vector<int> SampleFrameIndices(int total_frames, double video_fps,
                                    const VideoOptions& options);

// Frame `index`'s time in seconds: index / video_fps in float32, as transformers divides its int32
// frame indices by the frame rate.
double FrameTimestamp(int index, double video_fps);

// "mm:ss" as Gemma4Processor writes frame timestamps (whole seconds, truncated).
std::string VideoTimestamp(double seconds);

}  // namespace gemma::media
