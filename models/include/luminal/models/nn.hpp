// Neural-network building blocks: plain graph-building code on top of the tensor API.
//
// Every module creates its weights as persisted, named Input tensors whose labels are
// the Hugging Face parameter names (e.g. "model.layers.0.self_attn.q_proj.weight"), so
// Runtime::load_safetensors fills them from a checkpoint. Linear weights are (out, in)
// as in PyTorch. Nothing here is specific to one model family.
//
// Precision: a module computes in the dtype of its input. F32 inputs give the F32
// graphs (half-precision weights converted where read). F16/BF16 inputs compute as
// transformers does with torch_dtype=bfloat16/float16: matmuls, residuals and caches in
// that dtype; RMSNorm statistics, activations and the attention softmax upcast to F32.
//
// Conventions for sequence models (batch 1): activations are (seq, features); the
// number of new tokens is the dynamic dim "s" and the number of tokens already in the
// KV cache is the dynamic dim "p", so one compiled graph serves prefill (s = prompt
// length, p = 0) and every decode step (s = 1, p = tokens so far).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "luminal/graph.hpp"
#include "luminal/host_tensor.hpp"
#include "luminal/runtime.hpp"
#include "luminal/tensor.hpp"

namespace luminal::models::nn {

// Host-side constants a module needs in its graph (e.g. RoPE inverse frequencies):
// persisted inputs whose values are computed on the host and set once after compiling.
class Constants {
 public:
  // A persisted F32 input named `name` holding `values` (shape = {values.size()}).
  GraphTensor add(Graph& g, const std::string& name, std::vector<float> values);
  // Set every constant on a runtime the graph was compiled into.
  void apply(Runtime& rt) const;
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<GraphTensor, HostTensor>> items_;
};

// A persisted, named weight input (F32, or `dtype`: F16/BF16 weights stay in their
// checkpoint's dtype and are converted where they are read, never copied to F32).
GraphTensor parameter(Graph& g, const std::string& name, const Shape& shape, DType dtype = DType::F32);

// `w` as F32 (a Cast when it is held in F16/BF16; backends read the weight itself).
GraphTensor as_f32(const GraphTensor& w);


// The dynamic dims of a sequence step.
struct SeqDims {
  Expression past = Expression::var("p");  // tokens already in the cache
  Expression seq = Expression::var("s");   // new tokens in this execution
};

// y = x W^T (+ b), in the dtype of x. Weight "<prefix>.weight" (out, in) in
// `weight_dtype` (converted to x's dtype where read); bias "<prefix>.bias" (out) in
// `bias_dtype`.
struct Linear {
  GraphTensor weight;
  std::optional<GraphTensor> bias;
  Linear() = default;
  Linear(Graph& g, const std::string& prefix, int64_t in_features, int64_t out_features, bool with_bias = false,
         DType weight_dtype = DType::F32, DType bias_dtype = DType::F32);
  GraphTensor operator()(const GraphTensor& x) const { return x.linear(weight.cast(x.dtype()), bias); }
};

// Token embedding: "<prefix>.weight" (vocab, dim); ids (any shape, integer) -> (..., dim)
// in `compute_dtype`.
struct Embedding {
  GraphTensor weight;
  DType compute_dtype = DType::F32;
  Embedding() = default;
  Embedding(Graph& g, const std::string& prefix, int64_t vocab, int64_t dim, DType weight_dtype = DType::F32,
            DType compute_dtype = DType::F32);
  GraphTensor operator()(const GraphTensor& ids) const { return weight.embedding(ids).cast(compute_dtype); }
};

// RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * w. With unit_offset (Gemma)
// the scale is (1 + w). Weight "<prefix>.weight" (dim) in `weight_dtype`.
// F16/BF16 x, as transformers: the norm in F32, then Llama casts to x's dtype and
// multiplies by w there; Gemma multiplies by (1 + w) in F32 and casts after.
struct RMSNorm {
  GraphTensor weight;
  double eps = 1e-6;
  bool unit_offset = false;
  RMSNorm() = default;
  RMSNorm(Graph& g, const std::string& prefix, int64_t dim, double eps, bool unit_offset = false,
          DType weight_dtype = DType::F32);
  GraphTensor operator()(const GraphTensor& x) const;
};

// LayerNorm over the last dim with optional bias. "<prefix>.weight", "<prefix>.bias".
struct LayerNorm {
  GraphTensor weight;
  std::optional<GraphTensor> bias;
  double eps = 1e-5;
  LayerNorm() = default;
  LayerNorm(Graph& g, const std::string& prefix, int64_t dim, double eps, bool with_bias = true);
  GraphTensor operator()(const GraphTensor& x) const { return x.layer_norm(1, weight, bias, eps); }
};

// ---- rotary position embeddings ----------------------------------------------------

// RoPE parameters as in Hugging Face `rope_parameters` / `rope_scaling`.
struct RopeConfig {
  std::string type = "default";  // "default", "linear" or "llama3"
  double theta = 10000.0;
  int64_t head_dim = 0;
  double factor = 1.0;                             // linear, llama3
  double low_freq_factor = 1.0;                    // llama3
  double high_freq_factor = 4.0;                   // llama3
  int64_t original_max_position_embeddings = 8192; // llama3
  friend bool operator==(const RopeConfig&, const RopeConfig&) = default;
};

// The inverse frequencies (head_dim / 2 values), computed in float32 exactly as
// transformers' ROPE_INIT_FUNCTIONS do. Throws luminal::Error for an unknown type.
std::vector<float> rope_inv_freq(const RopeConfig& config);

// cos/sin tables for positions [past, past + seq): each (seq, head_dim / 2), computed
// in F32 and then converted to the dtype asked for (transformers' order).
struct Rotary {
  GraphTensor cos, sin;
};

class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;
  // `name` labels the persisted inverse-frequency constant (e.g. "rope.global.inv_freq").
  RotaryEmbedding(Graph& g, Constants& constants, const std::string& name, const RopeConfig& config);
  Rotary tables(const SeqDims& dims, DType dtype = DType::F32) const;
  // x: (seq, heads, head_dim). HF's rotate_half convention: the two halves of the head
  // dim are the (real, imaginary) pairs.
  static GraphTensor apply(const GraphTensor& x, const Rotary& r);
  const RopeConfig& config() const { return config_; }

 private:
  Graph* graph_ = nullptr;
  GraphTensor inv_freq_;
  RopeConfig config_;
};

// ---- attention ----------------------------------------------------------------------

// The KV cache of one attention layer: persisted inputs (max_seq, kv_heads, head_dim)
// of `dtype` that survive executions; rows [0, p) hold the keys/values of earlier tokens.
struct KVCache {
  GraphTensor k, v;
  int64_t max_seq = 0, kv_heads = 0, head_dim = 0;
  KVCache() = default;
  KVCache(Graph& g, const std::string& prefix, int64_t max_seq, int64_t kv_heads, int64_t head_dim,
          DType dtype = DType::F32);
};

// Write the new rows (seq, kv_heads, head_dim) at [past, past + seq) of `cache` through
// Graph::update; returns the rows [0, past + seq) of the updated cache.
GraphTensor cache_append(const GraphTensor& cache, const GraphTensor& rows, int64_t max_seq, const SeqDims& dims);

// Additive causal mask (seq, past + seq), F32: 0 where query i (absolute position
// past + i) may attend key j (j <= past + i, and j > past + i - window when a sliding
// window is set), -1e9 elsewhere.
GraphTensor causal_mask(Graph& g, const SeqDims& dims, std::optional<int64_t> sliding_window = std::nullopt);

struct AttentionOptions {
  double scale = 1.0;                          // multiplies q.k
  std::optional<double> softcap;               // tanh soft-capping of the scores
  std::optional<int64_t> sliding_window;       // keys older than the window are masked
};

// Grouped-query attention of new queries against cached keys/values, in q's dtype; with
// F16/BF16 the scores are upcast to F32 for the scale, soft-cap, mask and softmax, and
// the probabilities cast back (transformers' eager attention).
//   q: (seq, heads, head_dim); k, v: (seq, kv_heads, head_dim), RoPE already applied.
// Appends k, v to `cache` and returns (seq, heads * head_dim).
GraphTensor cached_attention(const GraphTensor& q, const GraphTensor& k, const GraphTensor& v, const KVCache& cache,
                             const SeqDims& dims, const AttentionOptions& options);

// Plain (uncached) grouped-query attention over given keys/values with an optional
// additive mask: q (sq, heads, d), k/v (sk, kv_heads, d), mask broadcastable to (sq, sk).
// Precision as cached_attention.
GraphTensor gqa_attention(const GraphTensor& q, const GraphTensor& k, const GraphTensor& v,
                          const std::optional<GraphTensor>& mask, const AttentionOptions& options);

// ---- feed-forward --------------------------------------------------------------------

enum class Activation { SiLU, GeluTanh, Gelu, Relu };
// Parse a Hugging Face activation name (silu, swish, gelu_pytorch_tanh, gelu_new,
// gelu, relu); throws luminal::Error naming `option` and the value otherwise.
Activation parse_activation(const std::string& name, const std::string& option);
// In x's dtype; F16/BF16 compute in F32 and round once, as torch's kernels do.
GraphTensor activate(const GraphTensor& x, Activation act);

// down(act(gate(x)) * up(x)): SwiGLU with SiLU, GeGLU with GELU(tanh).
struct GatedMLP {
  Linear gate, up, down;
  Activation act = Activation::SiLU;
  GatedMLP() = default;
  GatedMLP(Graph& g, const std::string& prefix, int64_t hidden, int64_t intermediate, Activation act,
           bool with_bias = false, DType weight_dtype = DType::F32, DType bias_dtype = DType::F32);
  GraphTensor operator()(const GraphTensor& x) const { return down(activate(gate(x), act) * up(x)); }
};

// fc2(act(fc1(x))): the classic two-layer MLP.
struct MLP {
  Linear fc1, fc2;
  Activation act = Activation::GeluTanh;
  MLP() = default;
  MLP(Graph& g, const std::string& fc1_prefix, const std::string& fc2_prefix, int64_t hidden, int64_t intermediate,
      Activation act, bool with_bias = true, DType weight_dtype = DType::F32, DType bias_dtype = DType::F32);
  GraphTensor operator()(const GraphTensor& x) const { return fc2(activate(fc1(x), act)); }
};

// tanh(x / cap) * cap (tanh in F32 for F16/BF16 x).
GraphTensor softcap(const GraphTensor& x, double cap);

}  // namespace luminal::models::nn
