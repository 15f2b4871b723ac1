// Llama (LlamaForCausalLM): config parsing and the pre-norm decoder block that Qwen 3
// shares. Llama 3's "llama3" rope scaling is handled by nn::rope_inv_freq.
#include <cmath>

#include <nlohmann/json.hpp>

#include "luminal/error.hpp"
#include "transformer_internal.hpp"

namespace luminal::models {

TransformerConfig parse_llama_config(const nlohmann::json& j) {
  detail::ConfigReader r{j, "config.json"};
  TransformerConfig c;
  c.family = Family::Llama;
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);
  detail::parse_common(r, c);
  c.activation = nn::parse_activation(r.string_or("hidden_act", "silu"), "hidden_act");
  c.mlp_bias = r.boolean_or("mlp_bias", false);
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  // Llama has no sliding-window layers; any "layer_types" must be all full attention.
  if (auto types = detail::parse_layer_types(r, c.num_layers)) {
    for (bool s : *types)
      LUMINAL_CHECK(!s, "config.json: layer_types with sliding_attention is not supported for ", c.architecture);
  }
  return c;
}

namespace detail {

GraphTensor self_attention(const BlockContext& ctx, const GraphTensor& x) {
  const TransformerConfig& c = ctx.config;
  Graph& g = ctx.g;
  const std::string a = ctx.prefix + ".self_attn";
  const int64_t H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim;
  const Expression s = ctx.dims.seq;
  const DType pd = param_dtype(c);
  nn::Linear q_proj(g, a + ".q_proj", c.hidden_size, H * D, c.attention_bias, c.weight_dtype, pd);
  nn::Linear k_proj(g, a + ".k_proj", c.hidden_size, KV * D, c.attention_bias, c.weight_dtype, pd);
  nn::Linear v_proj(g, a + ".v_proj", c.hidden_size, KV * D, c.attention_bias, c.weight_dtype, pd);
  nn::Linear o_proj(g, a + ".o_proj", H * D, c.hidden_size, c.attention_bias, c.weight_dtype, pd);
  GraphTensor q = q_proj(x).reshape({s, H, D});
  GraphTensor k = k_proj(x).reshape({s, KV, D});
  GraphTensor v = v_proj(x).reshape({s, KV, D});
  if (c.qk_norm) {
    q = nn::RMSNorm(g, a + ".q_norm", D, c.rms_norm_eps, c.norm_unit_offset, pd)(q);
    k = nn::RMSNorm(g, a + ".k_norm", D, c.rms_norm_eps, c.norm_unit_offset, pd)(k);
  }
  q = nn::RotaryEmbedding::apply(q, ctx.rotary);
  k = nn::RotaryEmbedding::apply(k, ctx.rotary);
  nn::AttentionOptions opts;
  opts.scale = c.attention_scale;
  opts.softcap = c.attn_logit_softcapping;
  if (c.layers[static_cast<size_t>(ctx.layer)].sliding) opts.sliding_window = c.sliding_window;
  return o_proj(nn::cached_attention(q, k, v, ctx.cache, ctx.dims, opts));
}

GraphTensor prenorm_block(const BlockContext& ctx, const GraphTensor& x) {
  const TransformerConfig& c = ctx.config;
  const DType pd = param_dtype(c);
  nn::RMSNorm attn_norm(ctx.g, ctx.prefix + ".input_layernorm", c.hidden_size, c.rms_norm_eps, c.norm_unit_offset,
                        pd);
  nn::RMSNorm mlp_norm(ctx.g, ctx.prefix + ".post_attention_layernorm", c.hidden_size, c.rms_norm_eps,
                       c.norm_unit_offset, pd);
  nn::GatedMLP mlp(ctx.g, ctx.prefix + ".mlp", c.hidden_size, c.intermediate_size, c.activation, c.mlp_bias,
                   c.weight_dtype, pd);
  GraphTensor h = x + self_attention(ctx, attn_norm(x));
  return h + mlp(mlp_norm(h));
}

}  // namespace detail
}  // namespace luminal::models
