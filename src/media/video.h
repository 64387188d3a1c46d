// Video files -> frames, through the `ffmpeg` command-line tool run as a subprocess (the FFmpeg
// libraries' API churns between releases; the tool's flags do not, and a missing tool is a clear
// error instead of a link failure). Frames are sampled at `fps` (1 per second by default, what
// Gemma 4's model card describes), at most `max_frames`: a longer video is sampled more sparsely
// over its whole duration (ffprobe's duration), never cut. A frame is the first one at least
// 1 / fps after the previous frame taken; its timestamp is its presentation time.
#pragma once

#include <string>
#include <vector>

#include "media/image.h"

namespace gemma::media {

struct VideoOptions {
  double fps = 1.0;
  int max_frames = 32;
  std::string ffmpeg = "ffmpeg";          // looked up in PATH
  std::string ffprobe = "ffprobe";        // for the duration
  int64_t max_pixels = int64_t{1} << 26;  // per frame
};

struct VideoFrames {
  std::vector<Image> frames;
  std::vector<double> timestamps;  // seconds
};

// Error(kUnsupported) when ffmpeg is not installed, Error(kFormat) when it cannot decode the file
// (its message included), Error(kIo) for a missing file, Error(kCapacity) for huge frames.
VideoFrames DecodeVideo(const std::string& path, const VideoOptions& options = {});

// "mm:ss" as Gemma4Processor writes frame timestamps.
std::string VideoTimestamp(double seconds);

}  // namespace gemma::media
