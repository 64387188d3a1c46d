// Audio files through libsndfile and libsamplerate (DecodeAudio), then the front end
// (PrepareAudio): any bytes decode to finite 16 kHz samples or raise gemma::Error.
#include <cmath>

#include "fuzz_util.h"
#include "gemma/error.h"
#include "media/audio.h"
#include "media/audio_features.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // A 60 s limit keeps a fuzzed header that promises hours from costing the run minutes.
    const gemma::media::Audio a =
        gemma::media::DecodeAudio({data, size}, "fuzz", {.max_seconds = 60});
    for (float s : a.samples) GEMMA_FUZZ_CHECK(std::isfinite(s), "non-finite sample");
    const gemma::media::PreparedAudio p = gemma::media::PrepareAudio(a.samples, "fuzz");
    GEMMA_FUZZ_CHECK(p.soft_tokens > 0 && !p.chunks.empty(), "no soft tokens without an error");
    for (const auto& c : p.chunks)
      for (float v : c.mel) GEMMA_FUZZ_CHECK(std::isfinite(v), "non-finite feature");
  } catch (const gemma::Error&) {
  }
  return 0;
}
