// Decoder-only transformer language models loaded from a Hugging Face directory
// (config.json + safetensors shards, with or without model.safetensors.index.json).
//
// Supported architectures (config.json "architectures"[0], or "model_type"):
//   LlamaForCausalLM   (llama)       RMSNorm, SwiGLU, RoPE incl. Llama 3 rope scaling
//   Qwen3ForCausalLM   (qwen3)       Llama + per-head QK RMSNorm
//   Gemma3ForCausalLM  (gemma3_text) (1+w) RMSNorm before and after attention and MLP,
//                                    QK-norm, sqrt(hidden)-scaled embeddings, GeGLU,
//                                    sliding-window/global layers with their own RoPE,
//                                    query_pre_attn_scalar, final logit soft-capping
//                                    (attn_logit_softcapping is ignored, as transformers does)
//   Gemma3ForConditionalGeneration (gemma3): its text model only (images unsupported)
// Unsupported options raise luminal::Error naming the option.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "luminal/compile.hpp"
#include "luminal/graph.hpp"
#include "luminal/models/nn.hpp"
#include "luminal/runtime.hpp"
#include "luminal/tensor.hpp"

namespace luminal::models {

enum class Family { Llama, Qwen3, Gemma3 };

struct LayerConfig {
  bool sliding = false;        // sliding-window (local) attention
  nn::RopeConfig rope;         // this layer's rotary embedding
};

// Everything the graph builder needs, normalised from config.json.
struct TransformerConfig {
  std::string architecture;    // e.g. "LlamaForCausalLM"
  Family family = Family::Llama;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0;
  int64_t num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  nn::Activation activation = nn::Activation::SiLU;
  bool attention_bias = false, mlp_bias = false;
  bool tie_word_embeddings = false;
  bool qk_norm = false;             // Qwen3, Gemma3
  bool norm_unit_offset = false;    // Gemma: RMSNorm scales by (1 + w)
  bool sandwich_norms = false;      // Gemma: post-attention and pre/post-feedforward norms
  double embedding_scale = 1.0;     // Gemma: sqrt(hidden_size), rounded to float32
  double attention_scale = 0;       // multiplies q.k (head_dim^-0.5, or query_pre_attn_scalar^-0.5)
  std::optional<double> attn_logit_softcapping, final_logit_softcapping;
  std::optional<int64_t> sliding_window;
  std::vector<LayerConfig> layers;
  // Weight names: "<weight_prefix>embed_tokens.weight", "<weight_prefix>layers.<i>...",
  // "<weight_prefix>norm.weight" and lm_head_name (when not tied).
  std::string weight_prefix = "model.";
  std::string lm_head_name = "lm_head.weight";
  // The dtype the weight matrices (linear layers, embeddings) are held in: F32, or the
  // checkpoint's F16/BF16 (converted where they are read; norms and biases stay F32).
  // With an F16/BF16 compute_dtype, every weight is held in the compute dtype.
  DType weight_dtype = DType::F32;
  // What activations, matmuls, the residual stream and KV caches use (ModelOptions::
  // compute_dtype; CausalLM::build sets it).
  DType compute_dtype = DType::F32;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;   // config.json and generation_config.json, merged
};

// Parse `dir`/config.json (and generation_config.json when present). Throws
// luminal::Error for a missing or malformed file, an unknown architecture, or an
// unsupported option (naming it).
TransformerConfig load_config(const std::string& dir);
// The same from an already-parsed config object (generation config optional).
TransformerConfig parse_config(const nlohmann::json& config);

// Per-family config parsers (llama.cpp, qwen3.cpp, gemma3.cpp).
TransformerConfig parse_llama_config(const nlohmann::json& config);
TransformerConfig parse_qwen3_config(const nlohmann::json& config);
TransformerConfig parse_gemma3_config(const nlohmann::json& config);
// Gemma3ForConditionalGeneration: the text model of "text_config" (missing fields take
// Gemma3TextConfig's defaults); weights under "model.language_model.".
TransformerConfig parse_gemma3_multimodal_config(const nlohmann::json& config);

// F16 or BF16 when every weight matrix (rank >= 2) of the checkpoint in `dir` has that
// dtype, else F32.
DType checkpoint_matrix_dtype(const std::string& dir);

// The safetensors files of a model directory: the shards listed by
// model.safetensors.index.json, else every *.safetensors file. Throws naming a missing
// shard, or when there is none.
std::vector<std::string> find_weight_files(const std::string& dir);

struct ModelOptions {
  // KV-cache rows (the longest prompt + generation). 0: min(max_position_embeddings, 4096).
  int64_t max_seq_len = 0;
  // Logits for every new position (seq, vocab) instead of only the last (1, vocab).
  bool all_logits = false;
  // from_pretrained: when every weight matrix of the checkpoint is F16 (or every one is
  // BF16), keep them so (half the memory and bandwidth of F32; the values computed are
  // the same, since conversion to F32 is exact); otherwise, or when false, F32.
  bool keep_weight_dtype = true;
  // The dtype the model computes in: F32 (the default), or BF16/F16 as transformers
  // does with torch_dtype=bfloat16/float16: every weight (norms and biases too) is held
  // in that dtype (converted when loaded unless the checkpoint already has it), and
  // embeddings, matmuls, the residual stream and KV caches are in it; RMSNorm statistics,
  // activations, RoPE tables and the attention softmax are computed in F32 first. Logits
  // come out as F32 (exactly the half-precision values). Anything else throws.
  DType compute_dtype = DType::F32;
};

// A causal LM graph: token ids in, logits out, one KV cache per layer.
// Dynamic dims: "s" (new tokens) and "p" (tokens already cached).
class CausalLM {
 public:
  // Parse the config and build the graph (no weights are read yet).
  static CausalLM from_pretrained(const std::string& dir, const ModelOptions& options = {});
  static CausalLM build(const TransformerConfig& config, const ModelOptions& options = {});

  const TransformerConfig& config() const { return config_; }
  Graph& graph() { return *graph_; }
  const Graph& graph() const { return *graph_; }
  const std::string& dir() const { return dir_; }
  int64_t max_seq_len() const { return max_seq_; }
  bool all_logits() const { return all_logits_; }

  // (s) I32. The graph's dim map holds s = 1, p = min(max_seq / 2, 256) as representative
  // values for the compiler's search, so feed ids with Runtime::set_tensor (Generator::forward
  // does).
  GraphTensor input_ids() const { return input_ids_; }
  GraphTensor logits() const { return logits_; }        // (s, vocab) or (1, vocab), F32
  // (1) I64: greedy decoding's next token, the first maximum of the last row of the logits
  // as torch.argmax picks it (a NaN is the maximum; the first NaN wins).
  GraphTensor next_token() const { return next_token_; }
  const std::vector<nn::KVCache>& caches() const { return caches_; }
  // Names of every weight tensor the graph expects (HF names).
  const std::vector<std::string>& weight_names() const { return weight_names_; }

  // Fill the weights of a runtime this graph was compiled into from the model
  // directory's shards (checking every weight is present with the right shape), set the
  // host constants and zero the KV caches.
  void load_weights(Runtime& rt) const;
  // Zero the KV caches (not needed between prompts: positions >= p are never read).
  void clear_caches(Runtime& rt) const;

  // `options` with one plan for decode steps (s = 1) and one for prefills (s >= 2), each
  // searched at its own size: a program chosen for s = 1 may fuse work that a long
  // prompt repeats per token. Unchanged when `options` already has buckets for "s".
  CompileOptions with_prefill_plan(CompileOptions options) const;

 private:
  CausalLM() = default;
  TransformerConfig config_;
  std::string dir_;
  std::unique_ptr<Graph> graph_;  // stable address: tensors point at it
  nn::Constants constants_;
  GraphTensor input_ids_, logits_, next_token_;
  std::vector<nn::KVCache> caches_;
  std::vector<std::string> weight_names_;
  int64_t max_seq_ = 0;
  bool all_logits_ = false;
};

namespace detail {
// Helpers shared by the per-family config parsers.
struct ConfigReader {
  const nlohmann::json& j;
  std::string where;  // "config.json"
  bool has(const char* key) const;
  int64_t integer(const char* key) const;                          // required
  int64_t integer_or(const char* key, int64_t fallback) const;
  double number_or(const char* key, double fallback) const;
  std::optional<double> optional_number(const char* key) const;   // absent or null -> nullopt
  std::optional<int64_t> optional_integer(const char* key) const;
  bool boolean_or(const char* key, bool fallback) const;
  std::string string_or(const char* key, const std::string& fallback) const;
};
// Fill the fields common to all families (sizes, eps, tie, eos/bos, head_dim).
void parse_common(const ConfigReader& r, TransformerConfig& c);
// Parse one RoPE parameter object ({"rope_type"|"type", "rope_theta", "factor", ...}).
nn::RopeConfig parse_rope(const nlohmann::json& params, double default_theta, int64_t head_dim,
                          const std::string& option);
// The layer types from "layer_types" (sliding_attention / full_attention) or nullopt.
std::optional<std::vector<bool>> parse_layer_types(const ConfigReader& r, int64_t num_layers);
}  // namespace detail

}  // namespace luminal::models
