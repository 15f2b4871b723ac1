// Bad model directories give a luminal::Error that names the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "luminal/luminal.hpp"
#include "luminal/models/generate.hpp"
#include "tiny_model.hpp"

using namespace luminal;
using namespace luminal::models;
using luminal::models::testing::error_of;
using luminal::models::testing::random_weights;
using luminal::models::testing::temp_model_dir;
using luminal::models::testing::tiny_llama_config;
using luminal::models::testing::write_json;
using luminal::models::testing::write_tiny_model;
namespace fs = std::filesystem;

namespace {

// Compile and load weights: where missing/mismatched tensors surface.
void load(const fs::path& dir) {
  Generator::compile(CausalLM::from_pretrained(dir.string(), ModelOptions{8, false}), ReferenceRuntime{},
                     CompileOptions{});
}

std::string config_error(const nlohmann::json& config) {
  return error_of([&] { parse_config(config); });
}

#define EXPECT_ERROR_CONTAINS(message, needle) \
  EXPECT_NE((message).find(needle), std::string::npos) << "error was: '" << (message) << "'"

}  // namespace

TEST(ModelErrors, ValidModelLoads) {
  auto dir = write_tiny_model("valid", tiny_llama_config());
  EXPECT_EQ(error_of([&] { load(dir); }), "");
}

TEST(ModelErrors, UnknownArchitecture) {
  auto c = tiny_llama_config();
  c["architectures"] = {"MambaForCausalLM"};
  EXPECT_ERROR_CONTAINS(config_error(c), "unsupported architecture 'MambaForCausalLM'");
  c.erase("architectures");
  c["model_type"] = "gpt2";
  EXPECT_ERROR_CONTAINS(config_error(c), "unsupported architecture 'gpt2'");
}

TEST(ModelErrors, MalformedConfig) {
  auto dir = temp_model_dir("malformed");
  std::ofstream(dir / "config.json") << "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": ";
  EXPECT_ERROR_CONTAINS(error_of([&] { load_config(dir.string()); }), "is not valid JSON");

  auto c = tiny_llama_config();
  c.erase("hidden_size");
  EXPECT_ERROR_CONTAINS(config_error(c), "missing required field 'hidden_size'");
  c = tiny_llama_config();
  c["num_attention_heads"] = "four";
  EXPECT_ERROR_CONTAINS(config_error(c), "field 'num_attention_heads' must be an integer");
  c = tiny_llama_config();
  c["num_key_value_heads"] = 3;
  EXPECT_ERROR_CONTAINS(config_error(c), "multiple of num_key_value_heads");
  c = tiny_llama_config();
  c["architectures"] = "LlamaForCausalLM";
  EXPECT_ERROR_CONTAINS(config_error(c), "'architectures' must be a non-empty list");
  EXPECT_ERROR_CONTAINS(config_error(nlohmann::json::array()), "expected a JSON object");
  EXPECT_ERROR_CONTAINS(error_of([&] { load_config((dir / "nope").string()); }), "does not exist");
  fs::remove(dir / "config.json");
  EXPECT_ERROR_CONTAINS(error_of([&] { load_config(dir.string()); }), "no config.json");
}

TEST(ModelErrors, UnsupportedOptionsAreNamed) {
  auto c = tiny_llama_config();
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  EXPECT_ERROR_CONTAINS(config_error(c), "unsupported rope_scaling type 'yarn'");
  c = tiny_llama_config();
  c["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 10000.0}};
  EXPECT_ERROR_CONTAINS(config_error(c), "unsupported rope_parameters type 'dynamic'");
  c = tiny_llama_config();
  c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_ERROR_CONTAINS(config_error(c), "needs 'low_freq_factor'");
  c = tiny_llama_config();
  c["hidden_act"] = "mish";
  EXPECT_ERROR_CONTAINS(config_error(c), "unsupported hidden_act 'mish'");
  c = tiny_llama_config();
  c["quantization_config"] = {{"quant_method", "gptq"}};
  EXPECT_ERROR_CONTAINS(config_error(c), "quantization_config");
  c = tiny_llama_config();
  c["layer_types"] = {"full_attention"};
  EXPECT_ERROR_CONTAINS(config_error(c), "layer_types has 1 entries");
  c = tiny_llama_config();
  c["architectures"] = {"Gemma3ForCausalLM"};
  c["use_bidirectional_attention"] = true;
  EXPECT_ERROR_CONTAINS(config_error(c), "use_bidirectional_attention");
  c = tiny_llama_config();
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}};
  EXPECT_ERROR_CONTAINS(config_error(c), "partial_rotary_factor");
}

TEST(ModelErrors, WrongTensorShape) {
  auto c = tiny_llama_config();
  auto dir = temp_model_dir("wrong_shape");
  write_json(dir / "config.json", c);
  auto w = random_weights(c);
  w["model.layers.1.self_attn.k_proj.weight"] = HostTensor::zeros(DType::F32, 32 * 32, {32, 32});
  write_safetensors((dir / "model.safetensors").string(), w);
  std::string e = error_of([&] { load(dir); });
  EXPECT_ERROR_CONTAINS(e, "model.layers.1.self_attn.k_proj.weight");
  EXPECT_ERROR_CONTAINS(e, "has shape [32, 32]");
}

TEST(ModelErrors, MissingTensor) {
  auto c = tiny_llama_config();
  auto dir = temp_model_dir("missing_tensor");
  write_json(dir / "config.json", c);
  auto w = random_weights(c);
  w.erase("lm_head.weight");
  write_safetensors((dir / "model.safetensors").string(), w);
  EXPECT_ERROR_CONTAINS(error_of([&] { load(dir); }), "missing weight 'lm_head.weight'");
  // Tied embeddings need no lm_head.
  c["tie_word_embeddings"] = true;
  write_json(dir / "config.json", c);
  EXPECT_EQ(error_of([&] { load(dir); }), "");
}

TEST(ModelErrors, ShardsAndMissingShard) {
  auto c = tiny_llama_config();
  auto dir = temp_model_dir("shards");
  write_json(dir / "config.json", c);
  auto w = random_weights(c);
  // Two shards and an index, as save_pretrained writes them.
  std::map<std::string, HostTensor> a, b;
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (auto& [name, t] : w) {
    bool first = name.find("layers.1") == std::string::npos;
    (first ? a : b)[name] = t;
    index["weight_map"][name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors((dir / "model-00001-of-00002.safetensors").string(), a);
  write_safetensors((dir / "model-00002-of-00002.safetensors").string(), b);
  write_json(dir / "model.safetensors.index.json", index);
  EXPECT_EQ(find_weight_files(dir.string()).size(), 2u);
  EXPECT_EQ(error_of([&] { load(dir); }), "");
  fs::remove(dir / "model-00002-of-00002.safetensors");
  std::string e = error_of([&] { load(dir); });
  EXPECT_ERROR_CONTAINS(e, "missing shard 'model-00002-of-00002.safetensors'");
  // Without an index, the shards present are used, and the missing weights are named.
  fs::remove(dir / "model.safetensors.index.json");
  EXPECT_ERROR_CONTAINS(error_of([&] { load(dir); }), "missing weight 'model.layers.1.");
  fs::remove(dir / "model-00001-of-00002.safetensors");
  EXPECT_ERROR_CONTAINS(error_of([&] { load(dir); }), "no *.safetensors weight files");
}

TEST(ModelErrors, CorruptSafetensors) {
  auto c = tiny_llama_config();
  auto dir = temp_model_dir("corrupt");
  write_json(dir / "config.json", c);
  std::ofstream(dir / "model.safetensors") << "garbage";
  EXPECT_NE(error_of([&] { load(dir); }), "");
}
