// KV-cache behaviour of the model library on the reference interpreter: decode steps
// after a prefill equal a full recomputation, caches persist across executions, and one
// compiled graph serves every sequence length (dynamic dims "s" and "p").
#include <gtest/gtest.h>

#include <cmath>

#include "luminal/luminal.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/models/nn.hpp"
#include "tiny_model.hpp"

using namespace luminal;
using namespace luminal::models;
using luminal::models::testing::error_of;
using luminal::models::testing::tiny_llama_config;
using luminal::models::testing::write_tiny_model;

namespace {

const std::vector<int32_t> kIds = {5, 17, 3, 60, 42, 8, 91, 23, 11, 70};

Generator make_generator(const std::string& dir, int64_t max_seq = 32) {
  return Generator::compile(CausalLM::from_pretrained(dir, ModelOptions{max_seq, /*all_logits=*/true}),
                            ReferenceRuntime{}, CompileOptions{});
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

std::vector<float> row(const std::vector<float>& flat, size_t r, size_t vocab) {
  return std::vector<float>(flat.begin() + r * vocab, flat.begin() + (r + 1) * vocab);
}

}  // namespace

TEST(KVCache, DecodeStepsEqualFullRecomputation) {
  auto dir = write_tiny_model("decode_eq_full", tiny_llama_config());
  Generator gen = make_generator(dir.string());
  const size_t vocab = 96;
  // Incremental: prefill 4 tokens, then one token per execution.
  std::vector<std::vector<float>> incremental;
  std::vector<float> pre = gen.forward({kIds.begin(), kIds.begin() + 4});
  incremental.push_back(row(pre, 3, vocab));
  for (size_t i = 4; i < kIds.size(); ++i) incremental.push_back(gen.forward({kIds[i]}));
  EXPECT_EQ(gen.position(), static_cast<int64_t>(kIds.size()));
  // Full recomputation of every prefix on the same compiled graph.
  for (size_t n = 4; n <= kIds.size(); ++n) {
    gen.reset();
    std::vector<float> full = gen.forward({kIds.begin(), kIds.begin() + n});
    EXPECT_LT(max_abs_diff(incremental[n - 4], row(full, n - 1, vocab)), 1e-5) << "prefix length " << n;
  }
}

TEST(KVCache, ChunkedPrefillEqualsOnePrefill) {
  auto dir = write_tiny_model("chunked", tiny_llama_config());
  Generator gen = make_generator(dir.string());
  const size_t vocab = 96;
  std::vector<float> full = gen.forward(kIds);
  gen.reset();
  std::vector<float> a = gen.forward({kIds.begin(), kIds.begin() + 3});
  std::vector<float> b = gen.forward({kIds.begin() + 3, kIds.begin() + 7});
  std::vector<float> c = gen.forward({kIds.begin() + 7, kIds.end()});
  for (size_t r = 0; r < kIds.size(); ++r) {
    std::vector<float> got = r < 3 ? row(a, r, vocab) : r < 7 ? row(b, r - 3, vocab) : row(c, r - 7, vocab);
    EXPECT_LT(max_abs_diff(got, row(full, r, vocab)), 1e-5) << "position " << r;
  }
}

TEST(KVCache, CachesPersistAcrossExecutions) {
  auto dir = write_tiny_model("persist", tiny_llama_config());
  Generator gen = make_generator(dir.string(), 16);
  const auto& cache = gen.model().caches().at(1);
  const size_t row_size = static_cast<size_t>(cache.kv_heads * cache.head_dim);
  gen.forward({kIds.begin(), kIds.begin() + 5});
  std::vector<float> k1 = gen.runtime().get_f32(cache.k), v1 = gen.runtime().get_f32(cache.v);
  ASSERT_EQ(k1.size(), 16 * row_size);
  auto row_is_zero = [&](const std::vector<float>& t, size_t r) {
    for (size_t i = 0; i < row_size; ++i)
      if (t[r * row_size + i] != 0.f) return false;
    return true;
  };
  for (size_t r = 0; r < 16; ++r) {
    EXPECT_EQ(row_is_zero(k1, r), r >= 5) << "k row " << r;
    EXPECT_EQ(row_is_zero(v1, r), r >= 5) << "v row " << r;
  }
  gen.forward({kIds[5]});
  std::vector<float> k2 = gen.runtime().get_f32(cache.k);
  for (size_t i = 0; i < 5 * row_size; ++i) ASSERT_EQ(k1[i], k2[i]) << "earlier rows must not change";
  EXPECT_FALSE(row_is_zero(k2, 5));
  EXPECT_TRUE(row_is_zero(k2, 6));
  // The cache tensors are persisted inputs of shape (max_seq, kv_heads, head_dim).
  const Node& n = gen.model().graph().node(cache.k.id());
  EXPECT_TRUE(n.persist);
  EXPECT_EQ(to_string(n.shape), to_string(Shape{16, 2, 8}));
}

TEST(KVCache, OneCompiledGraphServesManyPromptsAndLengths) {
  auto dir = write_tiny_model("many", tiny_llama_config());
  Generator gen = make_generator(dir.string());
  const Runtime* rt = &gen.runtime();
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.stop_at_eos = false;
  o.record_logits = true;
  GenerateResult a1 = gen.generate({kIds.begin(), kIds.begin() + 3}, o);
  GenerateResult b = gen.generate({kIds.begin(), kIds.begin() + 7}, o);
  GenerateResult c = gen.generate({kIds[9]}, o);
  GenerateResult a2 = gen.generate({kIds.begin(), kIds.begin() + 3}, o);
  EXPECT_EQ(&gen.runtime(), rt);  // same compiled runtime throughout
  EXPECT_EQ(a1.tokens.size(), 6u);
  EXPECT_EQ(a1.stop_reason, "max_tokens");
  EXPECT_EQ(a1.tokens, a2.tokens);
  ASSERT_EQ(a1.logits.size(), a2.logits.size());
  for (size_t i = 0; i < a1.logits.size(); ++i) EXPECT_EQ(a1.logits[i], a2.logits[i]);
  EXPECT_EQ(b.tokens.size(), 6u);
  EXPECT_EQ(c.tokens.size(), 6u);
  // Greedy generation equals argmax of a full recomputation at every step.
  std::vector<int32_t> seq(kIds.begin(), kIds.begin() + 7);
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    gen.reset();
    std::vector<float> full = gen.forward(seq);
    std::vector<float> last(full.end() - 96, full.end());
    std::mt19937_64 rng;
    EXPECT_EQ(sample_token(last, {}, rng), b.tokens[i]) << "step " << i;
    seq.push_back(b.tokens[i]);
  }
}

// Greedy generation without recorded logits reads the graph's argmax (CausalLM::next_token)
// instead of the logits: the same tokens as sampling the logits read back. With a NaN logit
// both pick as torch.argmax does (the first NaN).
TEST(Generate, GreedyReadsTheGraphsArgmax) {
  auto dir = write_tiny_model("greedy_id", tiny_llama_config());
  Generator gen = make_generator(dir.string());
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.stop_at_eos = false;
  for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{4, 5, 6}, kIds}) {
    o.record_logits = true;
    const GenerateResult read_back = gen.generate(prompt, o);
    o.record_logits = false;
    const GenerateResult on_graph = gen.generate(prompt, o);
    EXPECT_EQ(on_graph.tokens, read_back.tokens);
    EXPECT_TRUE(on_graph.logits.empty());
  }
  // The graph's id against the host's greedy choice over the same row.
  gen.reset();
  std::vector<float> logits = gen.forward(kIds);
  std::vector<float> last(logits.end() - 96, logits.end());
  std::mt19937_64 rng;
  EXPECT_EQ(gen.runtime().get(gen.model().next_token()).get_i64(0), sample_token(last, {}, rng));
  // One lm_head row of NaN: that logit is NaN for every input.
  const NodeId head = gen.model().graph().find_input("lm_head.weight");
  ASSERT_NE(head, kNoNode);
  HostTensor w = gen.runtime().get_tensor(head);
  const int64_t hidden = static_cast<int64_t>(w.numel()) / 96;
  for (int64_t k = 0; k < hidden; ++k) w.set_f64(static_cast<size_t>(37 * hidden + k), std::nan(""));
  gen.runtime().set_tensor(head, w);
  gen.reset();
  gen.forward({4, 5, 6});
  EXPECT_EQ(gen.runtime().get(gen.model().next_token()).get_i64(0), 37) << "the NaN logit is the maximum";
  for (bool record : {false, true}) {
    o.record_logits = record;
    const GenerateResult nan_logits = gen.generate({4, 5, 6}, o);
    ASSERT_EQ(nan_logits.tokens.size(), 6u);
    for (int32_t t : nan_logits.tokens) EXPECT_EQ(t, 37) << "record_logits " << record;
  }
}

TEST(KVCache, ContextOverflowIsAnError) {
  auto dir = write_tiny_model("overflow", tiny_llama_config());
  Generator gen = make_generator(dir.string(), 6);
  gen.forward({1, 2, 3, 4, 5});
  gen.forward({6});
  EXPECT_NE(error_of([&] { gen.forward({7}); }).find("exceed the KV cache of 6"), std::string::npos);
  gen.reset();
  EXPECT_NE(error_of([&] { gen.forward({1, 2, 3, 4, 5, 6, 7}); }).find("max_seq_len"), std::string::npos);
  EXPECT_NE(error_of([&] { gen.forward({500}); }).find("outside the vocabulary"), std::string::npos);
  // Generation stops at the end of the cache instead of failing.
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.stop_at_eos = false;
  GenerateResult r = gen.generate({1, 2, 3}, o);
  EXPECT_EQ(r.stop_reason, "context");
  EXPECT_EQ(r.tokens.size(), 4u);  // 3 + 3 cached positions, then the last token from the full cache
}

TEST(Generate, StopTokensCallbackAndSampling) {
  auto dir = write_tiny_model("stop", tiny_llama_config());
  Generator gen = make_generator(dir.string());
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.stop_at_eos = false;
  GenerateResult greedy = gen.generate({4, 5, 6}, o);
  ASSERT_EQ(greedy.tokens.size(), 5u);
  // Stop on the second greedy token (included in the output).
  o.stop_tokens = {greedy.tokens[1]};
  GenerateResult stopped = gen.generate({4, 5, 6}, o);
  EXPECT_EQ(stopped.stop_reason, "stop_token");
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(greedy.tokens.begin(), greedy.tokens.begin() + 2));
  // The streaming callback sees every token and can stop generation.
  o.stop_tokens.clear();
  std::vector<int32_t> streamed;
  o.on_token = [&](int32_t t) {
    streamed.push_back(t);
    return streamed.size() < 3;
  };
  GenerateResult cb = gen.generate({4, 5, 6}, o);
  EXPECT_EQ(cb.stop_reason, "callback");
  EXPECT_EQ(streamed, cb.tokens);
  EXPECT_EQ(cb.tokens.size(), 3u);
  o.on_token = nullptr;
  // top_k = 1 is greedy at any temperature; seeded sampling is reproducible.
  o.sampling = {1.5, 1, 1.0, 3};
  EXPECT_EQ(gen.generate({4, 5, 6}, o).tokens, greedy.tokens);
  o.sampling = {1.0, 0, 0.95, 42};
  GenerateResult s1 = gen.generate({4, 5, 6}, o), s2 = gen.generate({4, 5, 6}, o);
  EXPECT_EQ(s1.tokens, s2.tokens);
  EXPECT_GT(s1.ttft_seconds, 0);
  EXPECT_GT(s1.tpot_seconds, 0);
  EXPECT_GT(s1.decode_tokens_per_second, 0);
}

// Greedy's argmax against a plain scan with torch.argmax's rules (the first maximum; a NaN
// is the maximum, the first NaN wins; -0 equals +0), over lengths around its 16 lanes and a
// vocabulary-sized row, with the maximum in every lane position and in the tail.
TEST(Sampling, GreedyIsTheFirstMaximumAsTorchArgmax) {
  auto expected = [](const std::vector<float>& v) {
    for (size_t i = 0; i < v.size(); ++i)
      if (std::isnan(v[i])) return static_cast<int32_t>(i);
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[best]) best = i;
    return static_cast<int32_t>(best);
  };
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 4.f);
  for (size_t n : {size_t{1}, size_t{5}, size_t{16}, size_t{17}, size_t{33}, size_t{128256}}) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    EXPECT_EQ(greedy_token(v), expected(v)) << n;
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      auto w = v;
      w[at] = 1e30f;  // the maximum here, and a tie after it for the first to win
      if (at + 3 < n) w[at + 3] = 1e30f;
      EXPECT_EQ(greedy_token(w), static_cast<int32_t>(at)) << n << " at " << at;
      w[n - 1 - at / 2] = NAN;
      EXPECT_EQ(greedy_token(w), expected(w)) << n << " NaN at " << n - 1 - at / 2;
    }
  }
  EXPECT_EQ(greedy_token(std::vector<float>{-0.f, 0.f, -1.f}), 0);
  EXPECT_EQ(greedy_token(std::vector<float>{-INFINITY, -INFINITY}), 0);
  EXPECT_EQ(greedy_token(std::vector<float>{-INFINITY, 2.f, INFINITY, INFINITY}), 2);
}

TEST(Sampling, GreedyTopKTopP) {
  std::mt19937_64 rng(0);
  std::vector<float> logits = {0.f, 3.f, 1.f, 3.f, -2.f};
  EXPECT_EQ(sample_token(logits, {}, rng), 1);  // first maximum
  EXPECT_EQ(sample_token(logits, {2.0, 1, 1.0, 0}, rng), 1);
  // top_p small keeps only the most likely token.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(logits, {1.0, 0, 0.01, 0}, rng), 1);
  // top_k = 3 never picks tokens outside {1, 3, 2}.
  for (int i = 0; i < 200; ++i) {
    int t = sample_token(logits, {5.0, 3, 1.0, 0}, rng);
    EXPECT_TRUE(t == 1 || t == 3 || t == 2) << t;
  }
  EXPECT_NE(error_of([&] { sample_token(logits, {1.0, 0, 0.0, 0}, rng); }).find("top_p"), std::string::npos);
}

// ---- nn modules ------------------------------------------------------------------------

TEST(NN, CausalMaskWithPastAndSlidingWindow) {
  Graph g;
  nn::SeqDims dims;
  auto full = nn::causal_mask(g, dims).output();
  auto window = nn::causal_mask(g, dims, 2).output();
  auto rt = g.compile(ReferenceRuntime{}, CompileOptions{});
  rt.execute({{"p", 2}, {"s", 3}});
  std::vector<float> m = rt.get_f32(full), w = rt.get_f32(window);
  ASSERT_EQ(m.size(), 15u);  // (s, p + s) = (3, 5)
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      const int q = 2 + i;  // absolute position of query i
      EXPECT_EQ(m[i * 5 + j], j <= q ? 0.f : -1e9f) << i << "," << j;
      EXPECT_EQ(w[i * 5 + j], (j <= q && j > q - 2) ? 0.f : -1e9f) << i << "," << j;
    }
}

TEST(NN, RopeMatchesDirectFormula) {
  nn::RopeConfig rc;
  rc.theta = 10000;
  rc.head_dim = 8;
  std::vector<float> inv = nn::rope_inv_freq(rc);
  ASSERT_EQ(inv.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / 8), 1e-7);
  Graph g;
  nn::Constants constants;
  nn::RotaryEmbedding rope(g, constants, "rope.inv_freq", rc);
  auto x = g.tensor({Expression::var("s"), 2, 8});
  auto y = nn::RotaryEmbedding::apply(x, rope.tables({})).output();
  auto rt = g.compile(ReferenceRuntime{}, CompileOptions{});
  constants.apply(rt);
  std::vector<float> xs(2 * 2 * 8);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
  rt.set_data(x, xs);
  rt.execute({{"p", 5}, {"s", 2}});
  std::vector<float> out = rt.get_f32(y);
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < 4; ++d) {
        double angle = (5 + t) * double(inv[d]);
        double x1 = xs[(t * 2 + h) * 8 + d], x2 = xs[(t * 2 + h) * 8 + d + 4];
        EXPECT_NEAR(out[(t * 2 + h) * 8 + d], x1 * std::cos(angle) - x2 * std::sin(angle), 1e-5);
        EXPECT_NEAR(out[(t * 2 + h) * 8 + d + 4], x2 * std::cos(angle) + x1 * std::sin(angle), 1e-5);
      }
}

TEST(NN, Llama3RopeScaling) {
  nn::RopeConfig rc{"llama3", 500000.0, 128, 8.0, 1.0, 4.0, 8192};
  std::vector<float> scaled = nn::rope_inv_freq(rc);
  rc.type = "default";
  std::vector<float> plain = nn::rope_inv_freq(rc);
  ASSERT_EQ(scaled.size(), 64u);
  EXPECT_EQ(scaled[0], plain[0]);                      // high frequencies unchanged
  EXPECT_NEAR(scaled[63], plain[63] / 8, 1e-12);       // low frequencies divided by factor
  for (size_t i = 0; i < 64; ++i) EXPECT_LE(scaled[i], plain[i]);
  rc.type = "yarn";
  EXPECT_NE(error_of([&] { nn::rope_inv_freq(rc); }).find("unsupported rope scaling type 'yarn'"), std::string::npos);
}

TEST(NN, AttentionSoftcapAndGroups) {
  // One query head group per kv head; compare with a direct computation.
  Graph g;
  auto q = g.tensor({1, 2, 2});
  auto k = g.tensor({3, 1, 2});
  auto v = g.tensor({3, 1, 2});
  nn::AttentionOptions o;
  o.scale = 0.5;
  o.softcap = 1.5;
  auto y = nn::gqa_attention(q, k, v, std::nullopt, o).output();
  auto rt = g.compile(ReferenceRuntime{}, CompileOptions{});
  std::vector<float> qs = {1, 2, -1, 0.5}, ks = {0.5, 1, -1, 2, 3, 0}, vs = {1, 0, 0, 1, 2, 2};
  rt.set_data(q, qs);
  rt.set_data(k, ks);
  rt.set_data(v, vs);
  rt.execute({});
  std::vector<float> out = rt.get_f32(y);
  ASSERT_EQ(out.size(), 4u);
  for (int h = 0; h < 2; ++h) {
    double s[3], total = 0;
    for (int j = 0; j < 3; ++j) {
      double dot = qs[h * 2] * ks[j * 2] + qs[h * 2 + 1] * ks[j * 2 + 1];
      s[j] = std::exp(std::tanh(dot * 0.5 / 1.5) * 1.5);
      total += s[j];
    }
    for (int d = 0; d < 2; ++d) {
      double e = 0;
      for (int j = 0; j < 3; ++j) e += s[j] / total * vs[j * 2 + d];
      EXPECT_NEAR(out[h * 2 + d], e, 1e-5);
    }
  }
}

TEST(NN, ModulesUseHuggingFaceNamesAndShapes) {
  Graph g;
  nn::Linear lin(g, "blk.proj", 3, 2, /*with_bias=*/true);
  nn::LayerNorm ln(g, "blk.ln", 2, 1e-5);
  nn::RMSNorm gemma_norm(g, "blk.norm", 2, 1e-6, /*unit_offset=*/true);
  nn::MLP mlp(g, "blk.fc1", "blk.fc2", 2, 4, nn::Activation::GeluTanh);
  auto x = g.tensor({1, 3});
  auto y = lin(x);
  auto a = ln(y).output();
  auto b = gemma_norm(y).output();
  auto c = mlp(y).output();
  EXPECT_NE(g.find_input("blk.proj.weight"), kNoNode);
  EXPECT_NE(g.find_input("blk.proj.bias"), kNoNode);
  EXPECT_EQ(to_string(g.node(g.find_input("blk.proj.weight")).shape), to_string(Shape{2, 3}));
  EXPECT_EQ(to_string(g.node(g.find_input("blk.fc1.weight")).shape), to_string(Shape{4, 2}));
  EXPECT_NE(g.find_input("blk.fc2.bias"), kNoNode);
  EXPECT_TRUE(g.node(g.find_input("blk.ln.weight")).persist);
  auto rt = g.compile(ReferenceRuntime{}, CompileOptions{});
  rt.set_data(x, {1.f, 2.f, 3.f});
  rt.set_data(lin.weight, {1.f, 0.f, 0.f, 0.f, 1.f, 1.f});
  rt.set_data(*lin.bias, {0.5f, -0.5f});
  rt.set_data(ln.weight, {2.f, 1.f});
  rt.set_data(*ln.bias, {0.f, 1.f});
  rt.set_data(gemma_norm.weight, {0.f, 1.f});
  for (auto* l : {&mlp.fc1, &mlp.fc2}) {
    auto n = g.node(l->weight.id()).shape[0].constant_value() * g.node(l->weight.id()).shape[1].constant_value();
    rt.set_data(l->weight, std::vector<float>(static_cast<size_t>(n), 0.1f));
    rt.set_data(*l->bias, std::vector<float>(g.node(l->bias->id()).shape[0].constant_value(), 0.f));
  }
  rt.execute({});
  // y = (1.5, 4.5): LayerNorm -> (-1, 1) * (2, 1) + (0, 1); Gemma RMSNorm scales by (1 + w).
  std::vector<float> la = rt.get_f32(a), lb = rt.get_f32(b), lc = rt.get_f32(c);
  EXPECT_NEAR(la[0], -2.0, 1e-4);
  EXPECT_NEAR(la[1], 2.0, 1e-4);
  const double rms = std::sqrt((1.5 * 1.5 + 4.5 * 4.5) / 2 + 1e-6);
  EXPECT_NEAR(lb[0], 1.5 / rms * 1.0, 1e-6);
  EXPECT_NEAR(lb[1], 4.5 / rms * 2.0, 1e-6);
  const double h = 0.1 * (1.5 + 4.5);
  const double gelu = 0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * (h + 0.044715 * h * h * h)));
  EXPECT_NEAR(lc[0], 4 * 0.1 * gelu, 1e-6);
}
