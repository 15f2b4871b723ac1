// Qwen 3 (Qwen3ForCausalLM): the Llama block plus per-head RMSNorm of q and k before
// RoPE. Optional sliding-window layers (use_sliding_window / layer_types).
#include <cmath>

#include <nlohmann/json.hpp>

#include "luminal/error.hpp"
#include "transformer_internal.hpp"

namespace luminal::models {

TransformerConfig parse_qwen3_config(const nlohmann::json& j) {
  detail::ConfigReader r{j, "config.json"};
  TransformerConfig c;
  c.family = Family::Qwen3;
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);
  detail::parse_common(r, c);
  c.activation = nn::parse_activation(r.string_or("hidden_act", "silu"), "hidden_act");
  c.qk_norm = true;
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  // Sliding window: transformers applies it to layers >= max_window_layers when
  // use_sliding_window is set (written out as layer_types by recent versions).
  const bool use_sw = r.boolean_or("use_sliding_window", false);
  if (use_sw) {
    c.sliding_window = r.optional_integer("sliding_window");
    LUMINAL_CHECK(c.sliding_window.has_value(), "config.json: use_sliding_window is true but sliding_window is not set");
  }
  auto types = detail::parse_layer_types(r, c.num_layers);
  if (!types && use_sw) {
    const int64_t first = r.integer_or("max_window_layers", c.num_layers);
    types.emplace();
    for (int64_t i = 0; i < c.num_layers; ++i) types->push_back(i >= first);
  }
  if (types) {
    for (int64_t i = 0; i < c.num_layers; ++i) {
      bool s = (*types)[static_cast<size_t>(i)];
      if (s && !c.sliding_window) {
        // transformers drops the window when use_sliding_window is false.
        s = false;
      }
      c.layers[static_cast<size_t>(i)].sliding = s;
    }
  }
  return c;
}

}  // namespace luminal::models
