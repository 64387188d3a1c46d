// Bad checkpoints: each a typed gemma::Error naming the file (and tensor), and a non-zero CLI exit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "format/safetensors.h"
#include "format/safetensors_writer.h"
#include "gemma/error.h"
#include "model/model.h"

namespace gemma {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/tiny_qat";

// A scratch copy of the QAT fixture that a test may damage.
std::string ScratchCopy(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("gemma_bad_input_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fs::path(kFixture) / "config.json", dir / "config.json");
  fs::copy_file(fs::path(kFixture) / "model.safetensors", dir / "model.safetensors");
  return dir.string();
}

// Rewrites the checkpoint through `edit`, which may drop or replace tensors.
void Rewrite(const std::string& dir,
             const std::function<bool(const TensorInfo&, SafetensorsWriter&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  SafetensorsFile f(path);  // stays mapped while the edit reads tensor bytes
  SafetensorsWriter w;
  for (const auto& [name, t] : f.tensors()) {
    if (edit(t, w))
      w.AddBytes(t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
  }
  w.Write(path + ".tmp");
  fs::rename(path + ".tmp", path);
}

void EditConfig(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(ReadFileToString(dir + "/config.json"));
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
}

Error LoadError(const std::string& dir) {
  try {
    Model::Load(dir);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << dir << " loaded";
  return Error(ErrorCode::kInternal, "loaded");
}

void ExpectMentions(const Error& e, const std::string& what) {
  EXPECT_NE(std::string(e.what()).find(what), std::string::npos)
      << e.what() << "\nshould mention " << what;
}

int CliExit(const std::string& dir) {
  const std::string cmd = std::string(GEMMA_BINARY_DIR) + "/tools/gemma-engine inspect --model '" +
                          dir + "' > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(BadCheckpoint, TheUntouchedCopyLoads) {
  const std::string dir = ScratchCopy("ok");
  EXPECT_NO_THROW(Model::Load(dir));
  if (fs::exists(std::string(GEMMA_BINARY_DIR) + "/tools/gemma-engine")) EXPECT_EQ(CliExit(dir), 0);
}

TEST(BadCheckpoint, TruncatedFile) {
  const std::string dir = ScratchCopy("truncated");
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 1000);
  const Error e = LoadError(dir);
  EXPECT_EQ(e.code(), ErrorCode::kFormat);
  ExpectMentions(e, "model.safetensors");
  ExpectMentions(e, "truncated");
  if (fs::exists(std::string(GEMMA_BINARY_DIR) + "/tools/gemma-engine")) EXPECT_EQ(CliExit(dir), 2);
}

TEST(BadCheckpoint, CorruptedHeader) {
  const std::string dir = ScratchCopy("corrupt");
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.write("\x01\x02\x03\x04", 4);  // garbage inside the JSON header
  }
  const Error e = LoadError(dir);
  EXPECT_EQ(e.code(), ErrorCode::kFormat);
  ExpectMentions(e, "model.safetensors");
}

TEST(BadCheckpoint, MissingTensorIsNamed) {
  const std::string dir = ScratchCopy("missing");
  const std::string victim = "model.layers.3.mlp.down_proj.weight_scale";
  Rewrite(dir, [&](const TensorInfo& t, SafetensorsWriter&) { return t.name != victim; });
  const Error e = LoadError(dir);
  EXPECT_EQ(e.code(), ErrorCode::kMissingTensor);
  ExpectMentions(e, victim);
  if (fs::exists(std::string(GEMMA_BINARY_DIR) + "/tools/gemma-engine")) EXPECT_EQ(CliExit(dir), 2);
}

TEST(BadCheckpoint, WrongDtypeForTheQuantFormat) {
  const std::string dir = ScratchCopy("dtype");
  const std::string victim = "model.layers.0.self_attn.q_proj.weight";  // int4: U8 [128, 32]
  Rewrite(dir, [&](const TensorInfo& t, SafetensorsWriter& w) {
    if (t.name != victim) return true;
    w.AddBytes(t.name, DType::kI8, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes));
    return false;
  });
  const Error e = LoadError(dir);
  EXPECT_EQ(e.code(), ErrorCode::kShape);
  ExpectMentions(e, victim);
  ExpectMentions(e, "4-bit");
}

TEST(BadCheckpoint, ShapeDisagreesWithConfig) {
  const std::string dir = ScratchCopy("shape");
  EditConfig(dir, [](nlohmann::json& j) { j["intermediate_size"] = 80; });
  const Error e = LoadError(dir);
  EXPECT_EQ(e.code(), ErrorCode::kShape);
  ExpectMentions(e, "mlp.gate_proj.weight");
  ExpectMentions(e, "model.safetensors");
}

TEST(BadCheckpoint, UnknownQuantMethodAndBadFieldValue) {
  const std::string d1 = ScratchCopy("quant_method");
  EditConfig(d1, [](nlohmann::json& j) { j["quantization_config"]["quant_method"] = "gptq"; });
  const Error e1 = LoadError(d1);
  EXPECT_EQ(e1.code(), ErrorCode::kUnsupported);
  ExpectMentions(e1, "quant_method");
  ExpectMentions(e1, "config.json");

  const std::string d2 = ScratchCopy("field");
  EditConfig(d2, [](nlohmann::json& j) { j["layer_types"][0] = "chunked_attention"; });
  const Error e2 = LoadError(d2);
  EXPECT_EQ(e2.code(), ErrorCode::kUnsupported);
  ExpectMentions(e2, "layer_types");
  if (fs::exists(std::string(GEMMA_BINARY_DIR) + "/tools/gemma-engine")) EXPECT_EQ(CliExit(d2), 2);
}

TEST(BadCheckpoint, NonFiniteActivationScale) {
  const std::string dir = ScratchCopy("scale");
  const std::string victim = "model.layers.0.mlp.up_proj.input_activation_scale";
  Rewrite(dir, [&](const TensorInfo& t, SafetensorsWriter& w) {
    if (t.name != victim) return true;
    const float nan = std::nanf("");
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &nan, 4);
    w.AddBytes(t.name, DType::kF32, t.shape, b);
    return false;
  });
  const Error e = LoadError(dir);
  EXPECT_EQ(e.code(), ErrorCode::kFormat);
  ExpectMentions(e, "model.layers.0.mlp.up_proj");
}

}  // namespace
}  // namespace gemma
