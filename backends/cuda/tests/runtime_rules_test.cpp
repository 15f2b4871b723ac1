// The CUDA runtime without a GPU: the unavailable path throws the clear error; the
// backend's rules put both matmul implementations into the e-graph; and every kernel the
// runtime would compile for a set of extracted programs (MLP, attention, transformer
// block, in F32 and with BF16 data) compiles with NVRTC for sm_90, which needs no GPU.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "luminal/kernel/nvrtc.hpp"
#include "luminal/luminal.hpp"
#include "luminal/search/genetic.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "luminal_cuda/cuda_runtime.hpp"
#include "luminal_cuda/device.hpp"
#include "test_graphs.hpp"

using namespace luminal;
using namespace luminal::testing;

namespace {

bool allow_no_nvrtc() {
  const char* v = std::getenv("LUMINAL_ALLOW_NO_NVRTC");
  return v && std::string(v) == "1";
}

// Programs extracted from the e-graph grown by the core rules and the CUDA backend's
// rules (in its stages), by random genomes.
search::LoweredGraph saturated(TestModel& m) {
  auto lowered = search::lower_to_egraph(m.cx, [](egraph::EGraph& eg) { cuda::register_runtime_primitives(eg); });
  auto files = search::core_rule_files();
  for (auto& f : cuda::runtime_rule_files()) files.push_back(f);
  search::load_rule_files(lowered, files);
  ReferenceRuntime base;
  for (const auto& stage : cuda::runtime_rule_stages(base, CompileOptions().rulesets({"core", "commute"}))) {
    std::vector<egraph::Schedule> sets;
    for (auto& rs : stage.rulesets) sets.push_back(egraph::Schedule::run(rs));
    egraph::RunOptions ro;
    ro.node_limit = static_cast<size_t>(stage.node_limit);
    lowered.egraph->run(egraph::Schedule::saturate(sets), ro);
  }
  return lowered;
}

std::vector<search::Extracted> extract_programs(TestModel& m, int count, uint64_t seed) {
  auto lowered = saturated(m);
  auto space = search::choice_space(lowered);
  std::mt19937_64 rng(seed);
  std::vector<search::Extracted> programs;
  for (int c = 0; c < count; ++c) {
    search::Genome g(space.slots.size());
    for (size_t s = 0; s < g.size(); ++s) g[s] = static_cast<uint32_t>(rng() % space.options[s].size());
    if (auto p = search::extract(lowered, space, g)) programs.push_back(std::move(*p));
  }
  return programs;
}

int count_ops(const luminal::Graph& g, const std::string& name) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == OpKind::BackendOp && node.backend->name == name;
  return n;
}

void build_bf16_mlp(TestModel& m) {
  auto x = m.cx.named_tensor("x", {3, 24}, DType::BF16);
  m.inputs.push_back(x);
  auto w = m.cx.named_tensor("w", {40, 24}, DType::BF16).persist();
  auto w2 = m.cx.named_tensor("w2", {24, 40}, DType::BF16).persist();
  m.inputs.push_back(w);
  m.inputs.push_back(w2);
  m.outputs.push_back(x.linear(w).silu().linear(w2).rms_norm(1, std::nullopt, 1e-5).output());
}

}  // namespace

TEST(CudaRuntimeNoGpu, UnavailableThrowsTheClearError) {
  if (cuda::available().ok) GTEST_SKIP() << "skipped: a GPU is present (" << cuda::available().message << ")";
  try {
    cuda::CudaRuntime rt;
    FAIL() << "constructing the CUDA runtime without a GPU did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUDA backend unavailable: "), std::string::npos) << what;
    EXPECT_NE(what.find(cuda::available().message), std::string::npos) << what;
  }
  // Compiling with it fails the same way, never a crash.
  luminal::Graph cx;
  auto x = cx.tensor({3});
  (x * 2.0).output();
  EXPECT_THROW(cx.compile(cuda::CudaRuntime{}, CompileOptions()), Error);
}

TEST(CudaRuntimeNoGpu, MatmulRulesOfferBothImplementations) {
  TestModel m;
  build_mlp(m);
  auto programs = extract_programs(m, 200, 7);
  ASSERT_GT(programs.size(), 50u);
  int gemv = 0, lt = 0, fused = 0;
  for (const auto& p : programs) {
    gemv += count_ops(p.program, "CudaGemv") > 0;
    lt += count_ops(p.program, "CudaCublasLt") > 0;
    fused += count_ops(p.program, "Fused") > 0;
  }
  EXPECT_GT(gemv, 0);
  EXPECT_GT(lt, 0);
  EXPECT_GT(fused, 0);
}

TEST(CudaRuntimeNoGpu, MatmulRulesPinTheLayout) {
  // A matmul of integers is not a GEMM for this backend; a 2-D SumReduce of a Mul that is
  // not matmul-shaped (an elementwise product summed) is not either.
  luminal::Graph cx;
  auto a = cx.tensor({4, 6}, DType::I32);
  auto b = cx.tensor({6, 5}, DType::I32);
  auto c = cx.tensor({4, 6});
  auto d = cx.tensor({4, 6});
  a.matmul(b).output();
  (c * d).sum({1}).output();
  TestModel m;
  m.cx = cx;
  auto programs = extract_programs(m, 60, 3);
  ASSERT_FALSE(programs.empty());
  for (const auto& p : programs) {
    EXPECT_EQ(count_ops(p.program, "CudaGemv"), 0);
    EXPECT_EQ(count_ops(p.program, "CudaCublasLt"), 0);
  }
}

// Grouped-query attention as the models spell it (models/src/nn.cpp, gqa_attention): q
// stacked per kv head, scores rounded to BF16, upcast, scaled, a causal mask added, softmax
// in F32, then the product with v, the probabilities rounded to BF16 (`rounded`) or left in
// F32 (another program). q is [s, heads, head_dim]; k and v hold p + s positions.
void build_gqa_attention(TestModel& m, const Expression& p, const Expression& s, int64_t heads, int64_t kv_heads,
                         int64_t head_dim, double scale, bool rounded) {
  const int64_t group = heads / kv_heads;
  const Expression t = p + s, z = Expression::index(), i = z / t, j = z % t;
  auto q = m.cx.named_tensor("q", {s, heads, head_dim}, DType::BF16);
  auto k = m.cx.named_tensor("k", {t, kv_heads, head_dim}, DType::BF16);
  auto v = m.cx.named_tensor("v", {t, kv_heads, head_dim}, DType::BF16);
  m.inputs = {q, k, v};
  auto mask = m.cx.iota((le(j, p + i) - 1) * 1000000000, {s, t}, DType::I32).cast(DType::F32);
  auto qh = q.reshape({s, kv_heads, group, head_dim}).permute({1, 2, 0, 3}).contiguous().reshape(
      {Expression(kv_heads), Expression(group) * s, head_dim});
  auto scores = qh.matmul(k.permute({1, 2, 0})).reshape({Expression(kv_heads), Expression(group), s, t})
                    .cast(DType::F32) * scale;
  auto probs = (scores + mask).softmax(-1);
  auto vh = v.permute({1, 0, 2});
  auto out = rounded ? probs.cast(DType::BF16).reshape({Expression(kv_heads), Expression(group) * s, t}).matmul(vh)
                     : probs.reshape({Expression(kv_heads), Expression(group) * s, t}).matmul(vh.cast(DType::F32));
  m.outputs.push_back(out.output());
}

// The attention rule (rules/cuda_attention.egg) offers CudaAttention for attention as the
// models spell it, with symbolic dims (a dim bucket's program) and with static ones, where
// the one query position is an axis of size 1 that reshapes spell unlike a contiguous view
// (the rule's views are compared with `reads-whole`; with `view-identity` it never matched
// a static decode graph). Never for the same chain with the probabilities left in F32 (no
// rounding to the dtype between the softmax and the product: another program).
TEST(CudaRuntimeNoGpu, AttentionRuleMatchesDecodeShapes) {
  ::setenv("LUMINAL_CUDA_ATTENTION", "1", 1);
  struct Unset {
    ~Unset() { ::unsetenv("LUMINAL_CUDA_ATTENTION"); }
  } unset;
  for (bool symbolic : {true, false})
    for (bool rounded : {true, false}) {
      TestModel m;
      const Expression p = symbolic ? Expression::var("p") : Expression(9), s = symbolic ? Expression::var("s") : Expression(1);
      build_gqa_attention(m, p, s, 4, 2, 16, 0.25, rounded);
      if (symbolic) {
        m.cx.set_dim("p", 9);
        m.cx.set_dim("s", 1);
      }
      int with = 0;
      for (const auto& program : extract_programs(m, 60, 7)) with += count_ops(program.program, "CudaAttention") > 0;
      const std::string what = std::string(symbolic ? "symbolic" : "static") + (rounded ? "" : ", F32 probabilities");
      if (rounded) EXPECT_GT(with, 0) << what << ": no extracted program runs the attention as one op";
      else EXPECT_EQ(with, 0) << what << ": the op was offered for a program it does not compute";
    }
}

// The search's first candidate is the cheapest program by the extraction costs. The
// attention op seeds a prefill's search where it runs on tensor cores (head dim 64 or 128:
// kernels/attention_flash.cu), never where it would take the decode kernel over a prefill's
// rows (no tensor cores, every key read once per row: a cost of 1 scaled by its output
// made it seed both, TTFT 15 -> 84 ms), and a decode step's only with
// LUMINAL_CUDA_ATTENTION=1 (=prefill: prefills only); unset or 0, no program has it.
TEST(CudaRuntimeNoGpu, AttentionSeedsWhereItRunsFast) {
  struct Unset {
    ~Unset() { ::unsetenv("LUMINAL_CUDA_ATTENTION"); }
  } unset;
  const DimMap decode{{"p", 511}, {"s", 1}}, prefill{{"p", 0}, {"s", 512}};
  for (const char* mode : {"1", "prefill", "", "0"})
    for (int head_dim : {128, 96}) {
      ::setenv("LUMINAL_CUDA_ATTENTION", mode, 1);
      const std::string what = detail::concat("LUMINAL_CUDA_ATTENTION='", mode, "' head dim ", head_dim, ": ");
      TestModel m;
      build_gqa_attention(m, Expression::var("p"), Expression::var("s"), 32, 8, head_dim, 0.125, true);
      m.cx.set_dim("p", 511);
      m.cx.set_dim("s", 1);
      auto lowered = saturated(m);
      auto space = search::choice_space(lowered);
      auto seeded = [&](const DimMap& dims) {
        auto genome = search::cheapest_genome(lowered, space, &dims, cuda::runtime_backend_op_cost);
        auto program = search::extract(lowered, space, genome);
        EXPECT_TRUE(program.has_value());
        return program ? count_ops(program->program, "CudaAttention") : -1;
      };
      const bool offered = std::string_view(mode) == "1" || std::string_view(mode) == "prefill";
      EXPECT_EQ(seeded(decode), offered && std::string_view(mode) == "1" ? 1 : 0) << what << "decode";
      EXPECT_EQ(seeded(prefill), offered && head_dim == 128 ? 1 : 0) << what << "a 512-token prefill";
      // Without the backend's cost, a prefill would be seeded with it wherever it is offered.
      auto plain = search::extract(lowered, space, search::cheapest_genome(lowered, space, &prefill));
      ASSERT_TRUE(plain.has_value());
      EXPECT_EQ(count_ops(plain->program, "CudaAttention"), offered ? 1 : 0)
          << what << "the default cost no longer prefers it: the test proves nothing";
    }
  ::setenv("LUMINAL_CUDA_ATTENTION", "2", 1);
  EXPECT_THROW(cuda::runtime_backend_op_cost("CudaAttention", std::vector<int64_t>{8, 4, 128}), Error);
}

TEST(CudaRuntimeNoGpu, EmittedKernelsCompileForSm90) {
  if (!kernel::nvrtc::available()) {
    if (allow_no_nvrtc()) GTEST_SKIP() << "skipped: NVRTC not loadable (" << kernel::nvrtc::load_error() << ")";
    FAIL() << "NVRTC not loadable: " << kernel::nvrtc::load_error() << " (LUMINAL_ALLOW_NO_NVRTC=1 to skip)";
  }
  std::set<std::string> regions;
  for (int which = 0; which < 4; ++which) {
    TestModel m;
    if (which == 0) build_mlp(m);
    if (which == 1) build_attention(m);
    if (which == 2) build_transformer_block(m);
    if (which == 3) build_bf16_mlp(m);
    for (const auto& p : extract_programs(m, 40, 11 + which))
      for (auto& r : cuda::program_regions(p.program)) regions.insert(r);
  }
  ASSERT_GT(regions.size(), 20u);
  // As the runtime does: several kernels per translation unit, compiled in parallel.
  std::vector<cuda::KernelSource> units;
  size_t k = 0;
  for (const auto& r : regions) {
    cuda::KernelSource one = cuda::region_kernel_source(r, "lm_k" + std::to_string(k));
    if (k % 8 == 0) units.push_back({"unit" + std::to_string(k / 8), "", one.options});
    units.back().code += one.code + "\n";
    ++k;
  }
  cuda::ModuleCache cache("sm_90", "");
  auto cubins = cache.cubins(units);
  ASSERT_EQ(cubins.size(), units.size());
  for (const auto& c : cubins) EXPECT_GT(c->size(), 100u);
}
