#include "format/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/thread_pool.h"
#include "gemma/error.h"

namespace gemma {

void SafetensorsWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            Fill fill) {
  entries_.push_back({name, dtype, std::move(shape), std::move(fill)});
}

void SafetensorsWriter::AddBytes(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                 std::vector<uint8_t> bytes) {
  auto data = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  const int64_t rows = shape.size() <= 1 ? 1 : shape[0];
  const size_t row_bytes = rows ? data->size() / static_cast<size_t>(rows) : 0;
  Add(name, dtype, std::move(shape), [data, row_bytes](int64_t b, int64_t e, uint8_t* dst) {
    std::memcpy(dst, data->data() + b * row_bytes, (e - b) * row_bytes);
  });
}

void SafetensorsWriter::Write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d);
    const uint64_t n = numel * DTypeSize(e.dtype);
    header[e.name] = {
        {"dtype", DTypeName(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h.push_back(' ');  // align the data section
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) throw Error(ErrorCode::kIo, path + ": cannot create");
  const uint64_t hl = h.size();
  bool ok = std::fwrite(&hl, 8, 1, f.get()) == 1 &&
            std::fwrite(h.data(), 1, h.size(), f.get()) == h.size();
  // Row blocks are filled by all hardware threads (each fill is a pure function of its rows, so
  // the bytes do not depend on the split): the 2.1 GB e2b-qat synth took ~60 s on one thread.
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  std::vector<uint8_t> buf;
  uint64_t done = 0;
  for (const Entry& e : entries_) {
    if (!ok) break;
    const int64_t rows = e.shape.size() <= 1 ? 1 : e.shape[0];
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d);
    if (rows == 0 || numel == 0) continue;
    const size_t row_bytes = numel * DTypeSize(e.dtype) / static_cast<uint64_t>(rows);
    const int64_t block =
        std::max<int64_t>(1, static_cast<int64_t>((64u << 20) / std::max<size_t>(row_bytes, 1)));
    for (int64_t r = 0; r < rows && ok; r += block) {
      const int64_t end = std::min(rows, r + block);
      buf.resize(static_cast<size_t>(end - r) * row_bytes);
      const int64_t n = end - r;
      const int tasks = pool ? static_cast<int>(std::min<int64_t>(n, 4 * threads)) : 1;
      if (tasks <= 1) {
        e.fill(r, end, buf.data());
      } else {
        pool->Run(tasks, [&](int t, int) {
          const int64_t b = r + n * t / tasks, en = r + n * (t + 1) / tasks;
          if (en > b) e.fill(b, en, buf.data() + static_cast<size_t>(b - r) * row_bytes);
        });
      }
      ok = std::fwrite(buf.data(), 1, buf.size(), f.get()) == buf.size();
      done += buf.size();
      if (progress_) progress_(done, offset);
    }
  }
  if (!ok || std::fflush(f.get()) != 0 || std::fclose(f.release()) != 0)
    throw Error(ErrorCode::kIo, path + ": write failed (disk full?)");
}

uint64_t SafetensorsWriter::Bytes(const Entry& e) {
  uint64_t numel = 1;
  for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d);
  return numel * DTypeSize(e.dtype);
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t n = 0;
  for (const Entry& e : entries_) n += Bytes(e);
  return n;
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> v;
  for (const Entry& e : entries_) v.push_back(e.name);
  return v;
}

std::vector<SafetensorsWriter> SafetensorsWriter::Split(int n) const {
  std::vector<SafetensorsWriter> parts(1);
  const uint64_t target = (data_bytes() + n - 1) / std::max(n, 1);
  uint64_t in_part = 0;
  for (const Entry& e : entries_) {
    // Close the shard once it holds its share (a tensor never straddles shards).
    if (in_part >= target && static_cast<int>(parts.size()) < n && in_part > 0) {
      parts.emplace_back();
      in_part = 0;
    }
    parts.back().entries_.push_back(e);
    in_part += Bytes(e);
  }
  for (SafetensorsWriter& p : parts) p.metadata_ = metadata_;
  return parts;
}

}  // namespace gemma
