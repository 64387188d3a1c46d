// safetensors headers and tensor tables: TensorSource::Open on a directory holding either one
// model.safetensors (the input) or a shard index plus one shard (the input split in two). Loaded
// tensors must lie inside their file and have dtype x shape bytes.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "format/safetensors.h"
#include "fuzz_util.h"
#include "gemma/error.h"

namespace fs = std::filesystem;

namespace {

std::string Dir() {
  static const std::string dir = [] {
    // tmpfs when there is one: every execution writes the files.
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("gemma-fuzz-safetensors-" + std::to_string(getpid()));
    fs::create_directories(d);
    return d.string();
  }();
  return dir;
}

void Write(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool sharded = in.ConsumeBool();
  const fs::path dir = Dir();
  for (const auto& e : fs::directory_iterator(dir)) fs::remove(e.path());
  if (sharded) {
    Write(dir / "model.safetensors.index.json", in.ConsumeRandomLengthString(4096));
    Write(dir / "model-00001-of-00001.safetensors", in.ConsumeRemainingBytesAsString());
  } else {
    Write(dir / "model.safetensors", in.ConsumeRemainingBytesAsString());
  }
  try {
    auto src = gemma::TensorSource::Open(dir.string());
    size_t sum = 0;
    for (const auto& [name, t] : src->all()) {
      GEMMA_FUZZ_CHECK(t->nbytes == static_cast<size_t>(t->numel()) * gemma::DTypeSize(t->dtype),
                       name);
      (void)t->ShapeString();
      if (t->nbytes) sum += t->data[0] + t->data[t->nbytes - 1];  // inside the mapping
    }
    GEMMA_FUZZ_CHECK(src->total_bytes() >= 0, "total");
    (void)src->Find("model.embed_tokens.weight");
    return static_cast<int>(sum & 0);
  } catch (const gemma::Error&) {
  }
  return 0;
}
