#include "format/safetensors.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "gemma/error.h"

namespace gemma {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Headers of real checkpoints are at most a few MB; 100 MB guards against garbage lengths.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

bool ParseDType(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16},  {"BF16", DType::kBF16}, {"F64", DType::kF64},
      {"I8", DType::kI8},   {"U8", DType::kU8},    {"I16", DType::kI16},   {"I32", DType::kI32},
      {"I64", DType::kI64}, {"BOOL", DType::kBool}};
  for (const auto& [name, t] : kNames) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::kFormat, path + ": " + what);
}

}  // namespace

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF64:
      return "F64";
    case DType::kI8:
      return "I8";
    case DType::kU8:
      return "U8";
    case DType::kI16:
      return "I16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kBool:
      return "BOOL";
  }
  return "?";
}

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

std::string TensorInfo::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

SafetensorsFile::SafetensorsFile(const std::string& path, const DeferTensor& defer, bool map)
    : file_(std::make_unique<MappedFile>(path, MappedFile::Unmappable::kOnDemand, map)) {
  const uint8_t* base = file_->data();
  const uint64_t size = file_->size();
  if (size < 8) Fail(path, "file is " + std::to_string(size) + " bytes, too short for a header");
  uint64_t header_len = 0;
  file_->Read(0, 8, &header_len);  // little-endian u64 (all supported hosts are little-endian)
  if (header_len > kMaxHeaderBytes) {
    Fail(path, "header length " + std::to_string(header_len) + " exceeds the 100 MB bound");
  }
  if (8 + header_len > size) {
    Fail(path, "header length " + std::to_string(header_len) + " runs past the end of the " +
                   std::to_string(size) + "-byte file (truncated?)");
  }
  std::string read_header;  // an unmapped file's header
  if (!base) {
    read_header.resize(header_len);
    file_->Read(8, header_len, read_header.data());
  }
  const std::string_view header_text =
      base ? std::string_view(reinterpret_cast<const char*>(base + 8), header_len)
           : std::string_view(read_header);
  json header;
  if (const size_t at = JsonTextDepthExceeded(header_text); at != std::string::npos) {
    Fail(path, "header nests deeper than " + std::to_string(kMaxJsonDepth) +
                   " arrays/objects (the limit) at byte " + std::to_string(8 + at));
  }
  try {
    header = json::parse(header_text.begin(), header_text.end());
  } catch (const json::exception& e) {
    Fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) Fail(path, "header is not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_len = size - data_start;

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) Fail(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto where = [&](const std::string& what) { Fail(path, "tensor '" + name + "': " + what); };
    if (!v.is_object()) where("entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) where("missing dtype");
    if (!v.contains("shape") || !v["shape"].is_array()) where("missing shape");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      where("missing data_offsets [begin, end]");
    }
    TensorInfo t;
    t.name = name;
    const std::string dtype = v["dtype"].get<std::string>();
    if (!ParseDType(dtype, &t.dtype)) where("unsupported dtype '" + dtype + "'");
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) where("shape has a non-integer or negative dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (1ull << 48) / dim) where("shape is absurdly large");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      where("data_offsets are not non-negative integers");
    }
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) where("data_offsets begin > end");
    if (e > data_len) {
      where("data_offsets end " + std::to_string(e) + " points past the end of the data (" +
            std::to_string(data_len) + " bytes; truncated file?)");
    }
    const uint64_t expect = numel * DTypeSize(t.dtype);
    if (e - b != expect) {
      where("byte length " + std::to_string(e - b) + " does not match " + dtype + " x " +
            t.ShapeString() + " = " + std::to_string(expect));
    }
    t.data = base ? base + data_start + b : nullptr;
    t.nbytes = e - b;
    t.file = &file_->path();
    t.offset = data_start + b;
    auto [pos, inserted] = tensors_.emplace(name, std::move(t));
    spans.push_back({b, e, &pos->first});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      Fail(path, "tensors '" + *spans[i - 1].name + "' and '" + *spans[i].name + "' overlap");
    }
  }
  if (!base) ReadTensors(defer);
}

SafetensorsFile::~SafetensorsFile() { std::free(buffer_); }

void SafetensorsFile::ReadTensors(const DeferTensor& defer) {
  // The kept tensors in file order, packed into one buffer where each starts at its file offset
  // modulo 64 (the alignment a mapping gives them); tensors adjacent in the file stay adjacent, so
  // each run of them is one read.
  constexpr size_t kAlign = 64;
  std::vector<TensorInfo*> kept;
  size_t deferred_bytes = 0;
  for (auto& [name, t] : tensors_) {
    if (t.nbytes > 0 && defer && defer(name)) {
      t.deferred = true;
      deferred_bytes += t.nbytes;
    } else if (t.nbytes > 0) {
      kept.push_back(&t);
    }
  }
  std::sort(kept.begin(), kept.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  std::vector<size_t> at(kept.size());
  size_t end = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    const uint64_t off = kept[i]->offset;
    if (i > 0 && off == kept[i - 1]->offset + kept[i - 1]->nbytes) {
      at[i] = at[i - 1] + kept[i - 1]->nbytes;
    } else {
      at[i] = end + (off - end) % kAlign;
    }
    end = at[i] + kept[i]->nbytes;
  }
  if (end == 0) return;
  // On 2 MiB boundaries, with transparent huge pages asked for: the read then faults the buffer in
  // 2 MiB at a time (4 KiB pages made reading 1.2 GB take 5 s instead of 0.5 on a VM).
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (end + kHuge - 1) / kHuge * kHuge;
  buffer_ = static_cast<uint8_t*>(std::aligned_alloc(kHuge, bytes));
  if (buffer_) ::madvise(buffer_, bytes, MADV_HUGEPAGE);  // advice only: failure changes nothing
  if (!buffer_) {
    throw Error(ErrorCode::kCapacity, path() + ": no memory for " + std::to_string(end) +
                                          " bytes of tensors (" + std::to_string(deferred_bytes) +
                                          " more are read when used)");
  }
  for (size_t i = 0; i < kept.size();) {
    size_t j = i + 1;
    while (j < kept.size() && at[j] == at[j - 1] + kept[j - 1]->nbytes &&
           kept[j]->offset == kept[j - 1]->offset + kept[j - 1]->nbytes) {
      ++j;
    }
    const size_t run = at[j - 1] + kept[j - 1]->nbytes - at[i];
    file_->Read(kept[i]->offset, run, buffer_ + at[i]);
    for (size_t k = i; k < j; ++k) kept[k]->data = buffer_ + at[k];
    i = j;
  }
}

void SafetensorsFile::Read(const TensorInfo& t, size_t at, size_t n, void* dst) const {
  if (at > t.nbytes || n > t.nbytes - at) {
    throw Error(ErrorCode::kIo, path() + ": tensor '" + t.name + "': bytes " + std::to_string(at) +
                                    " + " + std::to_string(n) + " are outside its " +
                                    std::to_string(t.nbytes));
  }
  if (t.data) {
    std::memcpy(dst, t.data + at, n);
  } else {
    file_->Read(t.offset + at, n, dst);
  }
}

void RejectGguf(const std::string& path) {
  std::error_code ec;
  bool gguf = fs::path(path).extension() == ".gguf";
  if (!gguf && fs::is_regular_file(path, ec)) {
    char magic[4] = {};
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      gguf = std::fread(magic, 1, 4, f) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
      std::fclose(f);
    }
  }
  if (gguf) {
    throw Error(ErrorCode::kUnsupported,
                path +
                    ": GGUF files are not supported; give a Hugging Face checkpoint: a "
                    "directory with config.json and model.safetensors (or sharded "
                    "model-*.safetensors with their index), or a .safetensors file in one");
  }
}

std::unique_ptr<TensorSource> TensorSource::Open(const std::string& path, const DeferTensor& defer,
                                                 bool map) {
  RejectGguf(path);
  auto src = std::unique_ptr<TensorSource>(new TensorSource());
  src->origin_ = path;
  std::vector<std::string> shard_paths;
  std::map<std::string, std::string> weight_map;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json")) {
      const std::string index_path = (dir / "model.safetensors.index.json").string();
      json index;
      const std::string index_text = ReadFileToString(index_path);
      if (JsonTextDepthExceeded(index_text) != std::string::npos) {
        throw Error(ErrorCode::kFormat, index_path + ": nests deeper than " +
                                            std::to_string(kMaxJsonDepth) +
                                            " arrays/objects (the limit)");
      }
      try {
        index = json::parse(index_text);
      } catch (const json::exception& e) {
        throw Error(ErrorCode::kFormat, index_path + ": not valid JSON: " + e.what());
      }
      if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
        throw Error(ErrorCode::kFormat, index_path + ": no weight_map object");
      }
      for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
        if (!it.value().is_string()) {
          throw Error(ErrorCode::kFormat,
                      index_path + ": weight_map['" + it.key() + "'] is not a string");
        }
        const std::string shard = it.value().get<std::string>();
        if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos) {
          throw Error(ErrorCode::kFormat,
                      index_path + ": shard name '" + shard + "' leaves the directory");
        }
        weight_map[it.key()] = (dir / shard).string();
        if (std::find(shard_paths.begin(), shard_paths.end(), (dir / shard).string()) ==
            shard_paths.end()) {
          shard_paths.push_back((dir / shard).string());
        }
      }
    } else if (fs::exists(dir / "model.safetensors")) {
      shard_paths.push_back((dir / "model.safetensors").string());
    } else {
      throw Error(ErrorCode::kIo, path + ": no model.safetensors or model.safetensors.index.json");
    }
  } else {
    shard_paths.push_back(path);
  }
  for (const std::string& p : shard_paths) {
    src->files_.push_back(std::make_unique<SafetensorsFile>(p, defer, map));
  }
  for (const auto& f : src->files_) {
    for (const auto& [name, info] : f->tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(name);
        if (it == weight_map.end() || it->second != f->path()) continue;  // index is authoritative
      }
      src->shard_of_[&info] = f.get();
      if (!src->index_.emplace(name, &info).second) {
        throw Error(ErrorCode::kFormat,
                    f->path() + ": tensor '" + name + "' also appears in another shard");
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    if (!src->index_.count(name)) {
      throw Error(ErrorCode::kMissingTensor,
                  shard + ": tensor '" + name + "' is listed in the index but not in the shard");
    }
  }
  return src;
}

const TensorInfo* TensorSource::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& TensorSource::Get(const std::string& name) const {
  const TensorInfo* t = Find(name);
  if (!t) throw Error(ErrorCode::kMissingTensor, origin_ + ": tensor '" + name + "' not found");
  return *t;
}

void TensorSource::Read(const TensorInfo& t, size_t at, size_t n, void* dst) const {
  auto it = shard_of_.find(&t);
  if (it == shard_of_.end()) {
    throw Error(ErrorCode::kInvalidArgument, origin_ + ": tensor '" + t.name + "' is not its own");
  }
  it->second->Read(t, at, n, dst);
}

size_t TensorSource::total_bytes() const {
  size_t n = 0;
  for (const auto& f : files_) n += f->file_size();
  return n;
}

}  // namespace gemma
