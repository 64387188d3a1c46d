// safetensors checkpoints: memory-mapped, validated, never copied.
//
// Where a file cannot be mapped (MappedFile: the browser's and Node's file systems under
// WebAssembly), its tensors are read into one buffer at load, except the ones the opener defers:
// those stay on disk (data null, `deferred`) and are read by byte range (TensorSource::Read), so a
// checkpoint larger than the WebAssembly heap can run when its largest tables are only read a
// row at a time.
//
// A checkpoint is one `*.safetensors` file or a shard set described by
// `model.safetensors.index.json`. Every header is validated before any tensor is used: header size
// bound, JSON syntax, known dtypes, dtype x shape == byte length, offsets inside the file, no
// overlapping tensors. Problems raise gemma::Error naming the file (and tensor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace gemma {

enum class DType { kF32, kF16, kBF16, kF64, kI8, kU8, kI16, kI32, kI64, kBool };

const char* DTypeName(DType t);
size_t DTypeSize(DType t);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping (or the read buffer); null when deferred
  size_t nbytes = 0;
  const std::string* file = nullptr;  // path of the shard holding it
  uint64_t offset = 0;                // of its first byte in that file
  bool deferred = false;              // left on disk: read with TensorSource::Read

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string ShapeString() const;  // e.g. "[262144, 1536]"
};

// Tensors (by name) an unmappable file leaves on disk.
using DeferTensor = std::function<bool(const std::string& name)>;

// One validated safetensors file.
class SafetensorsFile {
 public:
  // map = false: read as an unmappable file is.
  explicit SafetensorsFile(const std::string& path, const DeferTensor& defer = nullptr,
                           bool map = true);
  ~SafetensorsFile();
  const std::string& path() const { return file_->path(); }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return file_->size(); }
  // Whether the file is mapped (else its tensors were read, or deferred).
  bool mapped() const { return file_->data() != nullptr; }
  // Bytes [at, at + n) of tensor t of this file into dst. Throws Error(kIo).
  void Read(const TensorInfo& t, size_t at, size_t n, void* dst) const;

 private:
  void ReadTensors(const DeferTensor& defer);
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  uint8_t* buffer_ = nullptr;  // the tensors read from an unmappable file
};

// Throws Error(kUnsupported) when `path` is a GGUF file (by extension or magic), saying what is
// supported instead; users of llama.cpp try those first. Otherwise does nothing.
void RejectGguf(const std::string& path);

// All tensors of a checkpoint (one file or a shard set), by name.
class TensorSource {
 public:
  // `path` is a directory (model.safetensors or model.safetensors.index.json inside) or a
  // .safetensors file. `defer`: the tensors an unmappable file leaves on disk (a mapped file
  // defers nothing); map = false: every file is read as an unmappable one is.
  static std::unique_ptr<TensorSource> Open(const std::string& path,
                                            const DeferTensor& defer = nullptr, bool map = true);

  const TensorInfo* Find(const std::string& name) const;
  // Throws Error(kMissingTensor) naming the tensor and the checkpoint.
  const TensorInfo& Get(const std::string& name) const;
  const std::map<std::string, const TensorInfo*>& all() const { return index_; }
  // Bytes [at, at + n) of tensor t (one of this source's; deferred or not) into dst. Throws
  // Error(kIo) when the range is outside the tensor or the read fails. Safe from several threads.
  void Read(const TensorInfo& t, size_t at, size_t n, void* dst) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::string& origin() const { return origin_; }
  size_t total_bytes() const;

 private:
  std::string origin_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
  std::map<const TensorInfo*, const SafetensorsFile*> shard_of_;
};

}  // namespace gemma
