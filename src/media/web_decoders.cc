// The WebAssembly build's audio and video decoders (cmake: GEMMA_WEB). Audio files need
// libsndfile and libsamplerate, and video the ffmpeg command; neither is in that build, so a
// request with audio or video fails with Error(kUnsupported) before anything is evaluated. Images
// decode there as natively (image_decode.cc with stb_image, without libwebp), and the processors
// behind the decoders (image_processor.cc, audio_features.cc) are compiled as in native builds.
#include <string>
#include <vector>

#include "gemma/error.h"
#include "media/audio.h"
#include "media/video.h"

namespace gemma::media {
namespace {

[[noreturn]] void NotInWebBuild(const std::string& what, const std::string& origin) {
  throw Error(ErrorCode::kUnsupported,
              origin + ": " + what + " decoding is not in the WebAssembly build yet (docs/web.md)");
}

}  // namespace

Audio DecodeAudio(std::span<const uint8_t>, const std::string& origin, const AudioDecodeOptions&) {
  NotInWebBuild("audio", origin);
}
Audio LoadAudioFile(const std::string& path, const AudioDecodeOptions&) {
  NotInWebBuild("audio", path);
}
std::vector<float> Resample(std::span<const float>, int, int) { NotInWebBuild("audio", "resample"); }
VideoFrames DecodeVideo(const std::string& path, const VideoOptions&) {
  NotInWebBuild("video", path);
}
VideoFrames DecodeVideoBytes(std::span<const uint8_t>, const std::string& origin,
                             const VideoOptions&) {
  NotInWebBuild("video", origin);
}

}  // namespace gemma::media
