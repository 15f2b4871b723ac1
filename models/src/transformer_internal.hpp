// Shared pieces of the decoder-block builders (llama.cpp, qwen3.cpp, gemma3.cpp).
#pragma once

#include <string>

#include "luminal/models/nn.hpp"
#include "luminal/models/transformer.hpp"

namespace luminal::models::detail {

// The dtype of norm weights and biases: F32, or the compute dtype when it is F16/BF16
// (transformers holds every parameter in torch_dtype).
inline DType param_dtype(const TransformerConfig& c) {
  return is_half_float(c.compute_dtype) ? c.compute_dtype : DType::F32;
}

// What one decoder layer needs to build itself.
struct BlockContext {
  Graph& g;
  const TransformerConfig& config;
  int64_t layer;
  std::string prefix;           // "model.layers.<i>"
  const nn::SeqDims& dims;
  const nn::Rotary& rotary;     // cos/sin tables of this layer's RoPE
  const nn::KVCache& cache;
};

// Self-attention of a (normalised) input x (seq, hidden): q/k/v projections, optional
// per-head QK norm, RoPE, cached grouped-query attention, output projection.
GraphTensor self_attention(const BlockContext& ctx, const GraphTensor& x);
// The Llama-style pre-norm block (Llama, Qwen3):
//   h = x + attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h)).
GraphTensor prenorm_block(const BlockContext& ctx, const GraphTensor& x);
// Gemma 3's block with norms before and after attention and feed-forward.
GraphTensor gemma3_block(const BlockContext& ctx, const GraphTensor& x);

}  // namespace luminal::models::detail
