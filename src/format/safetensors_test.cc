#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "format/safetensors_writer.h"
#include "gemma/error.h"

namespace gemma {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "gemma_format_test";
  fs::create_directories(dir);
  return (dir / name).string();
}

void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  std::string data(data_bytes, '\x01');
  f << data;
}

ErrorCode CodeOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no gemma::Error thrown";
  return ErrorCode::kInternal;
}

TEST(Safetensors, WriterRoundTrip) {
  SafetensorsWriter w;
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> ab(a.size() * 4);
  std::memcpy(ab.data(), a.data(), ab.size());
  w.AddBytes("a", DType::kF32, {2, 3}, ab);
  w.AddBytes("b", DType::kU8, {3}, {7, 8, 9});
  w.Add("c", DType::kI8, {4, 2}, [](int64_t b, int64_t e, uint8_t* dst) {
    for (int64_t r = b; r < e; ++r) {
      dst[(r - b) * 2] = static_cast<uint8_t>(r);
      dst[(r - b) * 2 + 1] = static_cast<uint8_t>(-r);
    }
  });
  w.SetMetadata("format", "pt");
  const std::string path = TempPath("rt.safetensors");
  w.Write(path);
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 3u);
  const TensorInfo& ta = f.tensors().at("a");
  EXPECT_EQ(ta.dtype, DType::kF32);
  EXPECT_EQ(ta.ShapeString(), "[2, 3]");
  EXPECT_EQ(reinterpret_cast<const float*>(ta.data)[5], 6.0f);
  EXPECT_EQ(f.tensors().at("b").data[2], 9);
  EXPECT_EQ(static_cast<int8_t>(f.tensors().at("c").data[7]), -3);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ta.data) % 8, 0u);
}

// Row blocks are filled by several threads (each given a sub-range of rows and the matching slice
// of the buffer); a tensor of many rows, some larger than the 64 MiB block, reads back row by row
// as its fill wrote it.
TEST(Safetensors, WriterFillsRowRangesInParallel) {
  SafetensorsWriter w;
  auto fill = [](int64_t cols) {
    return [cols](int64_t b, int64_t e, uint8_t* dst) {
      for (int64_t r = b; r < e; ++r)
        for (int64_t c = 0; c < cols; ++c)
          dst[(r - b) * cols + c] = static_cast<uint8_t>((r * 131 + c * 7) ^ (r >> 8));
    };
  };
  w.Add("many", DType::kU8, {1001, 37}, fill(37));
  w.Add("big", DType::kU8, {3, 40 << 20}, fill(40 << 20));  // 40 MiB rows: one row per block
  const std::string path = TempPath("parallel.safetensors");
  w.Write(path);
  SafetensorsFile f(path);
  for (const auto& [name, rows, cols] :
       {std::tuple<const char*, int64_t, int64_t>{"many", 1001, 37}, {"big", 3, 40 << 20}}) {
    const uint8_t* d = f.tensors().at(name).data;
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        bad += d[r * cols + c] != static_cast<uint8_t>((r * 131 + c * 7) ^ (r >> 8));
    EXPECT_EQ(bad, 0) << name;
  }
  std::filesystem::remove(path);
}

// Read instead of mapped (as on a file system that cannot map: the browser's): every tensor's
// bytes as the mapping has them, at the same address modulo 64; deferred tensors stay in the file
// and read back by byte range; the header checks are the mapped file's.
TEST(Safetensors, ReadInsteadOfMappedKeepsBytesAlignmentAndDefersTables) {
  SafetensorsWriter w;
  auto fill = [](int salt) {
    return [salt](int64_t b, int64_t e, uint8_t* dst) {
      for (int64_t i = b; i < e; ++i) dst[i - b] = static_cast<uint8_t>(i * 37 + salt * 101);
    };
  };
  // Odd sizes, so the tensors sit at every offset modulo 64.
  const std::vector<std::pair<std::string, int64_t>> shapes = {
      {"a", 3}, {"b.table", 4099}, {"c", 1}, {"d", 70000}, {"e.table", 65}, {"f", 129}, {"g", 0}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    w.Add(shapes[i].first, DType::kU8, {shapes[i].second}, fill(static_cast<int>(i)));
  }
  const std::string path = TempPath("unmapped.safetensors");
  w.Write(path);
  const DeferTensor defer = [](const std::string& n) { return n.ends_with(".table"); };
  const SafetensorsFile mapped(path, defer);
  ASSERT_TRUE(mapped.mapped());
  const SafetensorsFile read(path, defer, /*map=*/false);
  ASSERT_FALSE(read.mapped());
  for (const auto& [name, n] : shapes) {
    SCOPED_TRACE(name);
    const TensorInfo& m = mapped.tensors().at(name);
    const TensorInfo& r = read.tensors().at(name);
    EXPECT_FALSE(m.deferred);  // a mapped file defers nothing
    EXPECT_EQ(r.offset, m.offset);
    ASSERT_EQ(r.nbytes, static_cast<size_t>(n));
    if (n == 0) continue;
    const bool table = name.ends_with(".table");
    EXPECT_EQ(r.deferred, table);
    if (table) {
      EXPECT_EQ(r.data, nullptr);
    } else {
      ASSERT_NE(r.data, nullptr);
      EXPECT_EQ(std::memcmp(r.data, m.data, r.nbytes), 0);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data) % 64, reinterpret_cast<uintptr_t>(m.data) % 64);
    }
    // Byte ranges, from memory or the file.
    for (const auto& [at, len] : {std::pair<size_t, size_t>{0, r.nbytes},
                                  {r.nbytes / 3, 1},
                                  {r.nbytes - 1, 1},
                                  {r.nbytes / 2, r.nbytes - r.nbytes / 2}}) {
      std::vector<uint8_t> got(len);
      read.Read(r, at, len, got.data());
      EXPECT_EQ(std::memcmp(got.data(), m.data + at, len), 0) << at << " + " << len;
    }
    std::vector<uint8_t> sink(r.nbytes + 1);
    EXPECT_EQ(CodeOf([&] { read.Read(r, 0, r.nbytes + 1, sink.data()); }), ErrorCode::kIo);
    EXPECT_EQ(CodeOf([&] { read.Read(r, r.nbytes, 1, sink.data()); }), ErrorCode::kIo);
  }
  // Through a source: its own tensors only.
  const auto src = TensorSource::Open(path, defer, /*map=*/false);
  uint8_t byte = 0;
  src->Read(src->Get("e.table"), 64, 1, &byte);
  EXPECT_EQ(byte, mapped.tensors().at("e.table").data[64]);
  EXPECT_EQ(CodeOf([&] { src->Read(read.tensors().at("a"), 0, 1, &byte); }),
            ErrorCode::kInvalidArgument);
  // The header checks hold for a read file.
  const std::string bad = TempPath("unmapped_trunc.safetensors");
  WriteRaw(bad, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  EXPECT_EQ(CodeOf([&] { SafetensorsFile f(bad, nullptr, false); }), ErrorCode::kFormat);
  WriteRaw(bad, "{\"a\":", 0);
  EXPECT_EQ(CodeOf([&] { SafetensorsFile f(bad, nullptr, false); }), ErrorCode::kFormat);
  fs::remove(bad);
  fs::remove(path);
}

TEST(Safetensors, RejectsTruncatedFile) {
  const std::string path = TempPath("trunc.safetensors");
  WriteRaw(path, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  EXPECT_EQ(CodeOf([&] { SafetensorsFile f(path); }), ErrorCode::kFormat);
  try {
    SafetensorsFile f(path);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trunc.safetensors"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos);
  }
}

TEST(Safetensors, RejectsHeaderPastEnd) {
  const std::string path = TempPath("hdr.safetensors");
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = 1000;
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << "{}";
  f.close();
  EXPECT_EQ(CodeOf([&] { SafetensorsFile s(path); }), ErrorCode::kFormat);
}

TEST(Safetensors, RejectsTinyFileHugeHeaderAndBadJson) {
  const std::string p1 = TempPath("tiny.safetensors");
  std::ofstream(p1) << "abc";
  EXPECT_EQ(CodeOf([&] { SafetensorsFile s(p1); }), ErrorCode::kFormat);
  const std::string p2 = TempPath("huge.safetensors");
  {
    std::ofstream f(p2, std::ios::binary);
    const uint64_t n = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&n), 8);
  }
  EXPECT_EQ(CodeOf([&] { SafetensorsFile s(p2); }), ErrorCode::kFormat);
  const std::string p3 = TempPath("badjson.safetensors");
  WriteRaw(p3, R"({"a":{"dtype":"F32",)", 0);
  EXPECT_EQ(CodeOf([&] { SafetensorsFile s(p3); }), ErrorCode::kFormat);
}

TEST(Safetensors, RejectsDtypeShapeMismatchOverlapAndUnknownDtype) {
  const std::string p1 = TempPath("mismatch.safetensors");
  WriteRaw(p1, R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", 16);
  EXPECT_EQ(CodeOf([&] { SafetensorsFile s(p1); }), ErrorCode::kFormat);
  const std::string p2 = TempPath("overlap.safetensors");
  WriteRaw(p2,
           R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
           16);
  EXPECT_EQ(CodeOf([&] { SafetensorsFile s(p2); }), ErrorCode::kFormat);
  const std::string p3 = TempPath("dtype.safetensors");
  WriteRaw(p3, R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4);
  EXPECT_EQ(CodeOf([&] { SafetensorsFile s(p3); }), ErrorCode::kFormat);
  const std::string p4 = TempPath("negshape.safetensors");
  WriteRaw(p4, R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
  EXPECT_EQ(CodeOf([&] { SafetensorsFile s(p4); }), ErrorCode::kFormat);
}

TEST(Safetensors, ShardedIndexAndMissingTensor) {
  const fs::path dir = fs::path(TempPath("sharded"));
  fs::create_directories(dir);
  SafetensorsWriter w1, w2;
  w1.AddBytes("x", DType::kU8, {2}, {1, 2});
  w2.AddBytes("y", DType::kU8, {1}, {3});
  w1.Write((dir / "part-1.safetensors").string());
  w2.Write((dir / "part-2.safetensors").string());
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"x":"part-1.safetensors","y":"part-2.safetensors"}})";
  auto src = TensorSource::Open(dir.string());
  EXPECT_EQ(src->all().size(), 2u);
  EXPECT_EQ(src->Get("y").data[0], 3);
  EXPECT_EQ(CodeOf([&] { src->Get("z"); }), ErrorCode::kMissingTensor);

  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map":{"x":"part-1.safetensors","q":"part-2.safetensors"}})";
  EXPECT_EQ(CodeOf([&] { TensorSource::Open(dir.string()); }), ErrorCode::kMissingTensor);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map":{"x":"../evil.safetensors"}})";
  EXPECT_EQ(CodeOf([&] { TensorSource::Open(dir.string()); }), ErrorCode::kFormat);
  EXPECT_EQ(CodeOf([&] { TensorSource::Open((dir / "nope").string()); }), ErrorCode::kIo);
}

}  // namespace
}  // namespace gemma
