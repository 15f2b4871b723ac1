// Gemma 3 text (Gemma3ForCausalLM, model_type gemma3_text): alternating local
// (sliding-window) and global attention layers with separate RoPE, (1 + w) RMSNorm
// before and after attention and the GeGLU MLP, QK-norm, sqrt(hidden)-scaled
// embeddings, query_pre_attn_scalar and optional attention/final logit soft-capping.
#include <cmath>

#include <nlohmann/json.hpp>

#include "luminal/error.hpp"
#include "transformer_internal.hpp"

namespace luminal::models {

TransformerConfig parse_gemma3_config(const nlohmann::json& j) {
  detail::ConfigReader r{j, "config.json"};
  TransformerConfig c;
  c.family = Family::Gemma3;
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", true);
  detail::parse_common(r, c);
  LUMINAL_CHECK(!r.boolean_or("use_bidirectional_attention", false),
                "config.json: use_bidirectional_attention = true is not supported (causal attention only)");
  const std::string act = r.has("hidden_activation") && !j["hidden_activation"].is_null()
                              ? r.string_or("hidden_activation", "gelu_pytorch_tanh")
                              : r.string_or("hidden_act", "gelu_pytorch_tanh");
  c.activation = nn::parse_activation(act, "hidden_activation");
  c.qk_norm = true;
  c.norm_unit_offset = true;
  c.sandwich_norms = true;
  c.embedding_scale = static_cast<double>(static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size))));
  const double qpas = r.number_or("query_pre_attn_scalar", 256);
  LUMINAL_CHECK(qpas > 0, "config.json: query_pre_attn_scalar must be positive, got ", qpas);
  c.attention_scale = std::pow(qpas, -0.5);
  // attn_logit_softcapping is read but not applied: transformers' Gemma3Attention never
  // passes it to the attention function (Gemma 3 replaced Gemma 2's soft-capping with
  // QK-norm), and parity with transformers is the contract. nn::AttentionOptions::softcap
  // implements it for families that use it.
  (void)r.optional_number("attn_logit_softcapping");
  c.final_logit_softcapping = r.optional_number("final_logit_softcapping");
  c.sliding_window = r.optional_integer("sliding_window");
  if (!c.sliding_window) c.sliding_window = 4096;

  // Layer types: "layer_types", else every `sliding_window_pattern`-th layer is global.
  auto types = detail::parse_layer_types(r, c.num_layers);
  if (!types) {
    int64_t pattern = r.integer_or("sliding_window_pattern", r.integer_or("_sliding_window_pattern", 6));
    LUMINAL_CHECK(pattern > 0, "config.json: sliding_window_pattern must be positive, got ", pattern);
    types.emplace();
    for (int64_t i = 0; i < c.num_layers; ++i) types->push_back((i + 1) % pattern != 0);
  }

  // RoPE: global layers use rope_theta (+ rope_scaling), local ones rope_local_base_freq.
  nn::RopeConfig global, local;
  if (r.has("rope_parameters") && j["rope_parameters"].is_object()) {
    const auto& rp = j["rope_parameters"];
    if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
      global = detail::parse_rope(rp.value("full_attention", nlohmann::json::object()), 1e6, c.head_dim,
                                  "rope_parameters.full_attention");
      local = detail::parse_rope(rp.value("sliding_attention", nlohmann::json::object()),
                                 r.number_or("rope_local_base_freq", 1e4), c.head_dim,
                                 "rope_parameters.sliding_attention");
    } else {
      global = detail::parse_rope(rp, r.number_or("rope_theta", 1e6), c.head_dim, "rope_parameters");
      nlohmann::json lp = {{"rope_type", "default"}, {"rope_theta", r.number_or("rope_local_base_freq", 1e4)}};
      local = detail::parse_rope(lp, 1e4, c.head_dim, "rope_local_base_freq");
    }
  } else {
    nlohmann::json gp = nlohmann::json::object();
    if (r.has("rope_scaling") && j["rope_scaling"].is_object()) gp = j["rope_scaling"];
    gp["rope_theta"] = r.number_or("rope_theta", 1e6);
    global = detail::parse_rope(gp, 1e6, c.head_dim, "rope_scaling");
    nlohmann::json lp = {{"rope_type", "default"}, {"rope_theta", r.number_or("rope_local_base_freq", 1e4)}};
    local = detail::parse_rope(lp, 1e4, c.head_dim, "rope_local_base_freq");
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto& layer = c.layers[static_cast<size_t>(i)];
    layer.sliding = (*types)[static_cast<size_t>(i)];
    layer.rope = layer.sliding ? local : global;
  }
  return c;
}

TransformerConfig parse_gemma3_multimodal_config(const nlohmann::json& j) {
  LUMINAL_CHECK(j.contains("text_config") && j["text_config"].is_object(),
                "config.json: Gemma3ForConditionalGeneration needs a 'text_config' object");
  // Gemma3TextConfig's defaults: hub configs of the multimodal models omit many fields.
  nlohmann::json t = {{"vocab_size", 262208},        {"hidden_size", 2304},
                      {"intermediate_size", 9216},   {"num_hidden_layers", 26},
                      {"num_attention_heads", 8},    {"num_key_value_heads", 4},
                      {"head_dim", 256},             {"max_position_embeddings", 131072},
                      {"rms_norm_eps", 1e-6},        {"query_pre_attn_scalar", 256},
                      {"sliding_window", 4096},      {"rope_theta", 1000000.0},
                      {"rope_local_base_freq", 10000.0}, {"hidden_activation", "gelu_pytorch_tanh"}};
  for (const auto& [key, value] : j["text_config"].items()) t[key] = value;
  if (t.contains("rope_parameters") && t["rope_parameters"].is_object()) t.erase("rope_theta");
  t["architectures"] = {"Gemma3ForConditionalGeneration"};
  for (const char* key : {"eos_token_id", "bos_token_id"})
    if (j.contains(key) && (!t.contains(key) || t[key].is_null())) t[key] = j[key];
  // Embeddings are tied unless the top level says otherwise.
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null())
    t["tie_word_embeddings"] = j["tie_word_embeddings"];
  TransformerConfig c = parse_gemma3_config(t);
  c.weight_prefix = "model.language_model.";
  // transformers' Gemma3ForConditionalGeneration applies no final logit soft-capping
  // (its lm_head output is returned as is); match it.
  c.final_logit_softcapping = std::nullopt;
  return c;
}

namespace detail {

GraphTensor gemma3_block(const BlockContext& ctx, const GraphTensor& x) {
  const TransformerConfig& c = ctx.config;
  auto norm = [&](const char* name) {
    return nn::RMSNorm(ctx.g, ctx.prefix + "." + name, c.hidden_size, c.rms_norm_eps, /*unit_offset=*/true,
                       param_dtype(c));
  };
  nn::RMSNorm input_norm = norm("input_layernorm");
  nn::RMSNorm post_attn_norm = norm("post_attention_layernorm");
  nn::RMSNorm pre_ff_norm = norm("pre_feedforward_layernorm");
  nn::RMSNorm post_ff_norm = norm("post_feedforward_layernorm");
  nn::GatedMLP mlp(ctx.g, ctx.prefix + ".mlp", c.hidden_size, c.intermediate_size, c.activation, c.mlp_bias,
                   c.weight_dtype, param_dtype(c));
  GraphTensor h = x + post_attn_norm(self_attention(ctx, input_norm(x)));
  return h + post_ff_norm(mlp(pre_ff_norm(h)));
}

}  // namespace detail
}  // namespace luminal::models
