// ModelOptions::compute_dtype: F32 builds exactly the graph it always did (a fingerprint
// of every node, recorded before the option existed), BF16/F16 build half-precision
// graphs with the HF upcasts, and other dtypes are rejected with a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/models/generate.hpp"
#include "tiny_model.hpp"

using namespace luminal;
using namespace luminal::models;
using luminal::models::testing::error_of;
using luminal::models::testing::tiny_llama_config;
using luminal::models::testing::write_tiny_model;

namespace {

// Every field of every node (op, dtype, shape, payload, inputs and their views), hashed
// (FNV-1a): two graphs with equal fingerprints are built node for node the same.
uint64_t fingerprint(const Graph& g) {
  std::ostringstream s;
  for (const Node& n : g.nodes()) {
    s << op_name(n.op) << ' ' << dtype_name(n.dtype) << ' ' << to_string(n.shape) << ' ' << n.label << ' '
      << n.constant << ' ' << n.iota_expr.to_string() << ' ' << n.axis << ' ' << n.persist << ' ' << n.updates;
    for (const auto& in : n.inputs)
      s << " <" << in.node << ' ' << to_string(in.view.shape()) << ' ' << in.view.index_expression().to_string()
        << ' ' << in.view.valid_expression().to_string() << '>';
    s << '\n';
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s.str()) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A matmul's reduction: a SumReduce of the Mul of two different tensors (the norms'
// mean(x * x) multiplies a tensor by itself; softmax sums exp()).
bool is_matmul_sum(const Graph& g, const Node& n) {
  if (n.op != OpKind::SumReduce) return false;
  const Node& mul = g.node(n.inputs[0].node);
  return mul.op == OpKind::Mul && mul.inputs[0].node != mul.inputs[1].node;
}

nlohmann::json tiny_qwen3_config() {
  nlohmann::json c = tiny_llama_config();
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["model_type"] = "qwen3";
  c["head_dim"] = 16;
  c["tie_word_embeddings"] = true;
  c["use_sliding_window"] = true;
  c["sliding_window"] = 3;
  c["max_window_layers"] = 1;
  return c;
}

nlohmann::json tiny_gemma3_config() {
  nlohmann::json c = tiny_llama_config();
  c["architectures"] = {"Gemma3ForCausalLM"};
  c["model_type"] = "gemma3_text";
  c["head_dim"] = 16;
  c["query_pre_attn_scalar"] = 24;
  c["sliding_window"] = 4;
  c["layer_types"] = {"sliding_attention", "full_attention"};
  c["final_logit_softcapping"] = 30.0;
  c["hidden_activation"] = "gelu_pytorch_tanh";
  return c;
}

nlohmann::json tiny_llama_bias_tied_config() {
  nlohmann::json c = tiny_llama_config();
  c["attention_bias"] = true;
  c["mlp_bias"] = true;
  c["tie_word_embeddings"] = true;
  return c;
}

CausalLM build(const nlohmann::json& config, DType weight_dtype = DType::F32, ModelOptions options = {16, false}) {
  TransformerConfig c = parse_config(config);
  c.weight_dtype = weight_dtype;
  return CausalLM::build(c, options);
}

}  // namespace

// The fingerprints (and node counts) of the F32 graphs as built before compute_dtype
// existed, with F32 and BF16 weight storage: the default must not change a single node.
// (Updated twice since, on purpose: attention stacks each KV head's query heads as rows,
// a contiguous copy of q and two reshapes more per layer; the greedy argmax of the last
// row, CausalLM::next_token, 51 nodes more.)
TEST(ComputeDtype, F32GraphIsUnchanged) {
  struct Golden {
    const char* name;
    nlohmann::json config;
    DType weights;
    size_t nodes;
    uint64_t fingerprint;
  };
  const std::vector<Golden> golden = {
      {"llama", tiny_llama_config(), DType::F32, 359, 4949696431557542991ull},
      {"llama", tiny_llama_config(), DType::BF16, 375, 7839564527492513903ull},
      {"llama_bias_tied", tiny_llama_bias_tied_config(), DType::F32, 386, 1329418058686863541ull},
      {"llama_bias_tied", tiny_llama_bias_tied_config(), DType::BF16, 402, 14490797887474351277ull},
      {"qwen3", tiny_qwen3_config(), DType::F32, 410, 10280725084826393444ull},
      {"qwen3", tiny_qwen3_config(), DType::BF16, 426, 18081951784316675261ull},
      {"gemma3", tiny_gemma3_config(), DType::F32, 840, 5011445012627502582ull},
      {"gemma3", tiny_gemma3_config(), DType::BF16, 856, 2477356117757376727ull},
  };
  for (const auto& g : golden) {
    for (bool explicit_f32 : {false, true}) {
      ModelOptions options{16, false};
      if (explicit_f32) options.compute_dtype = DType::F32;
      CausalLM m = build(g.config, g.weights, options);
      EXPECT_EQ(m.graph().size(), g.nodes) << g.name << " " << dtype_name(g.weights);
      EXPECT_EQ(fingerprint(m.graph()), g.fingerprint) << g.name << " " << dtype_name(g.weights);
      EXPECT_EQ(m.config().compute_dtype, DType::F32);
    }
  }
}

// A BF16/F16 graph holds every weight and cache in that dtype, reads no F32 weight, and
// runs every matmul (the Mul -> SumReduce pairs over a weight or cache) in it.
TEST(ComputeDtype, HalfGraphsComputeInTheirDtype) {
  for (DType dt : {DType::BF16, DType::F16})
    for (const auto& config : {tiny_llama_config(), tiny_llama_bias_tied_config(), tiny_qwen3_config(),
                               tiny_gemma3_config()}) {
      ModelOptions options{16, false};
      options.compute_dtype = dt;
      CausalLM m = build(config, DType::F32, options);  // F32 storage requested: overridden
      const Graph& g = m.graph();
      EXPECT_EQ(m.config().compute_dtype, dt);
      EXPECT_EQ(m.config().weight_dtype, dt);
      for (const auto& name : m.weight_names()) EXPECT_EQ(g.node(g.find_input(name)).dtype, dt) << name;
      for (const auto& kv : m.caches()) {
        EXPECT_EQ(kv.k.dtype(), dt);
        EXPECT_EQ(kv.v.dtype(), dt);
      }
      EXPECT_EQ(m.logits().dtype(), DType::F32);
      std::map<DType, int> matmuls;
      for (const Node& n : g.nodes())
        if (is_matmul_sum(g, n)) ++matmuls[n.dtype];
      // The numerically sensitive ops (exp, log, sin/cos, sqrt, reciprocal, max: norms,
      // softmax, activations, RoPE tables, tanh) and every non-matmul sum run in F32 (cos
      // in F64, as the tensor API computes it).
      for (const Node& n : g.nodes()) {
        const bool sensitive = n.op == OpKind::Exp2 || n.op == OpKind::Log2 || n.op == OpKind::Sin ||
                               n.op == OpKind::Sqrt || n.op == OpKind::Recip || n.op == OpKind::MaxReduce;
        const bool plain_sum = n.op == OpKind::SumReduce && !is_matmul_sum(g, n);
        // (An argmax's index reduction is an integer max: nothing to round.)
        if ((sensitive || plain_sum) && is_float(n.dtype)) {
          EXPECT_TRUE(n.dtype == DType::F32 || n.dtype == DType::F64) << op_name(n.op) << " from " << n.user_op << " in "
                                         << m.config().architecture << " (" << dtype_name(dt) << ")";
        }
      }
      const auto& c = m.config();
      // q, k, v, o, gate, up, down, q.k and p.v per layer, and the lm_head.
      EXPECT_EQ(matmuls[dt], 9 * c.num_layers + 1) << dtype_name(dt) << " " << c.architecture;
      EXPECT_EQ(matmuls[DType::F32], 0) << c.architecture;
    }
}

TEST(ComputeDtype, UnsupportedDtypeIsAnError) {
  for (DType dt : {DType::I32, DType::F64, DType::I8}) {
    ModelOptions options{16, false};
    options.compute_dtype = dt;
    const std::string msg = error_of([&] { build(tiny_llama_config(), DType::F32, options); });
    EXPECT_NE(msg.find("ModelOptions::compute_dtype must be F32, BF16 or F16, got " + std::string(dtype_name(dt))),
              std::string::npos)
        << msg;
  }
}

// On the reference interpreter: a BF16 tiny Llama stays close to its F32 self (within a
// few BF16 rounding steps of the logits' scale) but is not equal to it, and its decode
// steps through the BF16 KV cache equal a full recomputation of each prefix.
TEST(ComputeDtype, Bf16RunsOnTheReferenceRuntime) {
  auto dir = write_tiny_model("bf16_ref", tiny_llama_config(), 7);
  const std::vector<int32_t> ids = {5, 17, 3, 60, 42, 8, 91};
  auto make = [&](DType dt) {
    ModelOptions options{16, true};
    options.compute_dtype = dt;
    return Generator::compile(CausalLM::from_pretrained(dir.string(), options), ReferenceRuntime{},
                              CompileOptions{});
  };
  Generator f32 = make(DType::F32), bf16 = make(DType::BF16);
  const std::vector<float> ref = f32.forward(ids), got = bf16.forward(ids);
  ASSERT_EQ(ref.size(), got.size());
  double scale = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::abs(double(ref[i])));
    err = std::max(err, std::abs(double(ref[i]) - double(got[i])));
    // Every logit is a BF16 value (handed out as F32).
    EXPECT_EQ(bf16_bits_to_f32(f32_to_bf16_bits(got[i])), got[i]);
  }
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 0.05 * scale) << "scale " << scale;
  // Decode step by step after a 3-token prefill: the last row equals the full prefill's.
  const size_t vocab = 96;
  bf16.reset();
  bf16.forward({ids.begin(), ids.begin() + 3});
  std::vector<float> last;
  for (size_t i = 3; i < ids.size(); ++i) last = bf16.forward({ids[i]});
  bf16.reset();
  const std::vector<float> full = bf16.forward(ids);
  for (size_t v = 0; v < vocab; ++v) EXPECT_NEAR(last[v], full[(ids.size() - 1) * vocab + v], 0.02 * scale);
}

// RMSNorm of BF16 input, checked element by element against transformers' order of
// roundings: Llama/Qwen cast the F32 norm to BF16 and then multiply by w in BF16; Gemma
// multiplies by (1 + w) in F32 and casts once. Each order is told apart from the other.
TEST(ComputeDtype, Bf16RmsNormRoundsWhereTransformersDoes) {
  const int64_t n = 64;
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto bf16 = [](double v) { return round_to_float_dtype(v, DType::BF16); };
  std::vector<double> x(n), w(n);
  for (auto& v : x) v = bf16(3.0 * normal(rng));
  for (auto& v : w) v = bf16(1.0 + 0.3 * normal(rng));
  x[5] = -0.0;
  double mean_sq = 0;
  for (double v : x) mean_sq += v * v / static_cast<double>(n);
  const double inv_rms = 1.0 / std::sqrt(mean_sq + 1e-5);
  for (bool gemma : {false, true}) {
    Graph g;
    nn::RMSNorm norm(g, "norm", n, 1e-5, /*unit_offset=*/gemma, DType::BF16);
    GraphTensor in = g.tensor({1, n}, DType::BF16);
    GraphTensor out = norm(in).output();
    ASSERT_EQ(out.dtype(), DType::BF16);
    auto rt = g.compile(ReferenceRuntime{}, CompileOptions{});
    rt.set_data(in, x);
    rt.set_data(norm.weight, w);
    rt.execute({});
    const std::vector<float> got = rt.get_f32(out);
    int hf_order = 0, other_order = 0, orders_differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double normed = static_cast<double>(static_cast<float>(x[i] * inv_rms));  // F32 statistics
      const double scale = gemma ? 1.0 + w[i] : w[i];
      const double hf = gemma ? bf16(normed * scale) : bf16(bf16(normed) * scale);
      const double other = gemma ? bf16(bf16(normed) * scale) : bf16(normed * scale);
      hf_order += got[i] == hf;
      other_order += got[i] == other && hf != other;
      orders_differ += hf != other;
    }
    EXPECT_GE(orders_differ, 8) << "the data must tell the two orders apart";
    // F32 statistics may differ from this emulation in the last bit, which can move a
    // BF16 rounding: allow one miss.
    EXPECT_GE(hf_order, n - 1) << (gemma ? "Gemma" : "Llama");
    EXPECT_LE(other_order, 1) << (gemma ? "Gemma" : "Llama");
  }
}
