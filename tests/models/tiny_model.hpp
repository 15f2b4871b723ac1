// Test helper: write a tiny random-weight Hugging Face model directory (config.json +
// model.safetensors) for a given config, using the model's own weight list and shapes.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "luminal/error.hpp"
#include "luminal/models/transformer.hpp"
#include "luminal/safetensors.hpp"

namespace luminal::models::testing {

inline nlohmann::json tiny_llama_config() {
  return nlohmann::json{{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"vocab_size", 96},
                        {"hidden_size", 32},
                        {"intermediate_size", 64},
                        {"num_hidden_layers", 2},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"max_position_embeddings", 64},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 10000.0},
                        {"tie_word_embeddings", false},
                        {"bos_token_id", 1},
                        {"eos_token_id", 2},
                        {"hidden_act", "silu"}};
}

// A fresh directory under the test temp dir.
inline std::filesystem::path temp_model_dir(const std::string& name) {
  // The pid keeps concurrent runs (release and asan ctest) apart.
  auto dir = std::filesystem::path(::testing::TempDir()) /
             ("luminal_models_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2);
}

// Random weights for every tensor the model built from `config` expects.
inline std::map<std::string, HostTensor> random_weights(const nlohmann::json& config, uint64_t seed = 0) {
  CausalLM m = CausalLM::build(parse_config(config), ModelOptions{8, false});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::map<std::string, HostTensor> out;
  const Graph& g = m.graph();
  for (const auto& name : m.weight_names()) {
    const Node& n = g.node(g.find_input(name));
    std::vector<int64_t> shape;
    size_t numel = 1;
    for (const auto& d : n.shape) {
      shape.push_back(d.constant_value());
      numel *= static_cast<size_t>(shape.back());
    }
    std::vector<float> v(numel);
    const bool norm = name.find("norm") != std::string::npos;
    const float scale = shape.size() == 2 ? 1.f / std::sqrt(static_cast<float>(shape[1])) : 0.1f;
    for (auto& x : v) x = norm ? 1.f + 0.1f * normal(rng) : scale * normal(rng);
    if (name.find("embed_tokens") != std::string::npos)
      for (auto& x : v) x = normal(rng);
    out[name] = HostTensor::from<float>(v, DType::F32, shape);
  }
  return out;
}

// Write config.json and model.safetensors; returns the directory.
inline std::filesystem::path write_tiny_model(const std::string& name, const nlohmann::json& config,
                                              uint64_t seed = 0) {
  auto dir = temp_model_dir(name);
  write_json(dir / "config.json", config);
  write_safetensors((dir / "model.safetensors").string(), random_weights(config, seed));
  return dir;
}

// Run f and return the luminal::Error message ("" if nothing was thrown).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const luminal::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace luminal::models::testing
