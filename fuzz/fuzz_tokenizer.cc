// tokenizer.json loading, then encoding and decoding with whatever loaded. Encode never throws
// for any bytes (tokenizer.h) and yields ids inside the vocabulary; Decode and the streaming
// decoder accept them.
#include <fuzzer/FuzzedDataProvider.h>

#include "fuzz_util.h"
#include "gemma/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string probe = in.ConsumeRandomLengthString(256);
  const std::string json = in.ConsumeRemainingBytesAsString();
  try {
    gemma::Tokenizer tok = gemma::Tokenizer::FromJson(json, "fuzz");
    for (auto mode :
         {gemma::Tokenizer::SpecialText::kMatch, gemma::Tokenizer::SpecialText::kAsText}) {
      const std::vector<int32_t> ids = tok.Encode(probe, mode);
      for (int32_t id : ids) GEMMA_FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "id range");
      (void)tok.Decode(ids);
      gemma::StreamDecoder sd(tok);
      for (int32_t id : ids) (void)sd.Push(id);
      (void)sd.Flush();
    }
  } catch (const gemma::Error&) {
  }
  return 0;
}
