// The CPU backend against the reference interpreter: ops through the tensor API (views,
// symbolic dims, dtypes), matmul layouts, models blocks, and genome fuzzing.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "test_graphs.hpp"
#include "luminal/cpu/cpu_runtime.hpp"
#include "luminal/cpu/custom_kernel.hpp"
#include "luminal/luminal.hpp"

using namespace luminal;

namespace {

bool same_value(double a, double b, double tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= tol * (1 + std::abs(b));
}

HostTensor varied(DType dt, size_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.5);
  const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -1.0, 3.0};
  HostTensor t = HostTensor::zeros(dt, n);
  for (size_t k = 0; k < n; ++k) {
    if (!is_float(dt)) t.set_i64(k, static_cast<int64_t>(rng() % 7) - 3);
    else t.set_f64(k, specials && rng() % 8 == 0 ? special[rng() % std::size(special)] : dist(rng));
  }
  return t;
}

// Build a graph, compile it for the CPU backend and the reference runtime, run both on
// the same varied data (for every dims map given) and compare every output.
void check(const std::string& what, const std::function<std::vector<GraphTensor>(Graph&, std::vector<GraphTensor>&)>& build,
           std::vector<DimMap> dim_sets = {{}}, bool specials = true, double tol = 1e-4,
           CompileOptions options = CompileOptions().search_graph_limit(8).trials(1)) {
  Graph cx;
  std::vector<GraphTensor> inputs;
  auto outputs = build(cx, inputs);
  for (auto& o : outputs) o = o.output();
  for (const auto& [k, v] : dim_sets.front()) cx.set_dim(k, v);
  auto cpu = cx.compile(cpu::CpuRuntime{}, options);
  auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
  uint32_t seed = 1;
  for (const auto& dims : dim_sets) {
    for (auto& in : inputs) {
      DimMap all = cx.dim_map();
      for (const auto& [k, v] : dims) all[k] = v;
      HostTensor t = varied(in.dtype(), static_cast<size_t>(in.numel().eval(all)), seed++, specials);
      cpu.set_data(in, t);
      ref.set_data(in, t);
    }
    DimMap all = cx.dim_map();
    for (const auto& [k, v] : dims) all[k] = v;
    cpu.execute(all);
    ref.execute(all);
    for (size_t o = 0; o < outputs.size(); ++o) {
      auto got = cpu.get(outputs[o]).to_f64(), want = ref.get(outputs[o]).to_f64();
      ASSERT_EQ(got.size(), want.size()) << what;
      double t = outputs[o].dtype() == DType::BF16 ? 2e-2 : outputs[o].dtype() == DType::F16 ? 1e-2 : tol;
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_TRUE(same_value(got[k], want[k], t)) << what << " output " << o << " element " << k << ": " << got[k]
                                                    << " instead of " << want[k];
    }
  }
}

}  // namespace

TEST(CpuBackend, ElementwiseAndReductions) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    check(std::string("unary ") + std::string(dtype_name(dt)), [dt](Graph& cx, std::vector<GraphTensor>& in) {
      auto x = cx.tensor({7, 13}, dt);
      in = {x};
      return std::vector<GraphTensor>{x.exp(), x.log(), x.sin(), x.sqrt(), x.reciprocal(), x.abs(), x.relu(),
                                      x.sigmoid(), x.tanh(), x.sum({1}), x.max({0}), x.mean({1})};
    });
  }
  check("binary with broadcast and transposed views", [](Graph& cx, std::vector<GraphTensor>& in) {
    auto a = cx.tensor({5, 9});
    auto b = cx.tensor({9, 5});
    auto c = cx.tensor({9});
    in = {a, b, c};
    return std::vector<GraphTensor>{a + b.t(), a * c, a - c, a / (b.t() + 3.0), a.maximum(b.t()), a.lt(b.t()).cast(DType::F32),
                                    a % (c + 5.0)};
  });
  check("integers", [](Graph& cx, std::vector<GraphTensor>& in) {
    auto a = cx.tensor({4, 6}, DType::I32);
    auto b = cx.tensor({6}, DType::I32);
    in = {a, b};
    return std::vector<GraphTensor>{a + b, a * b, a.sum({0}), a.max({1}), (a * 3 + b).cast(DType::F32)};
  });
}

// Several kernels reading one Iota or Constant (the wheres of tanh, GELU and clamps in
// different kernels): each kernel computes its own copy (kernel::fuse_program), with
// specials in the selected and the unselected values, odd sizes and a broadcast operand.
TEST(CpuBackend, WheresInSeparateKernelsShareTheirIndexes) {
  check("wheres in several kernels", [](Graph& cx, std::vector<GraphTensor>& in) {
    auto x = cx.tensor({5, 37});
    auto y = cx.tensor({5, 37});
    auto b = cx.tensor({37});
    in = {x, y, b};
    auto bx = x + b;
    return std::vector<GraphTensor>{bx.tanh(), (y * 2.0).tanh(), GraphTensor::where(x.lt(y), bx, y * 3.0),
                                    bx.gelu_tanh().sum({1}), y.clamp(-1.0, 2.0), bx.relu()};
  });
}

// MobileNet's blocks: batch norm and hardswish, then a depthwise convolution whose im2col
// gather reads each element k*k times (its producer stays a kernel of its own, computed
// once: kernel::replicated_by_gather), and a regular convolution as a GEMM over indexes
// that read nothing (computed on the first run only). Odd sizes, specials, three runs on
// new data so values computed once must still be right.
TEST(CpuBackend, ConvolutionsAfterNormAndHardswish) {
  check("depthwise and regular convolutions", [](Graph& cx, std::vector<GraphTensor>& in) {
    auto x = cx.tensor({1, 6, 5, 7});
    auto scale = cx.tensor({6});
    auto shift = cx.tensor({6});
    auto dw = cx.tensor({6, 1, 5, 5});
    auto w = cx.tensor({4, 6, 3, 3});
    in = {x, scale, shift, dw, w};
    auto bn = x * scale.reshape({1, 6, 1, 1}).expand({1, 6, 5, 7}) + shift.reshape({1, 6, 1, 1}).expand({1, 6, 5, 7});
    auto h = bn.hardswish();
    auto depthwise = h.conv2d(dw, std::nullopt, {1, 1}, {2, 2}, {1, 1}, 6);
    auto strided = h.conv2d(dw, std::nullopt, {2, 2}, {2, 2}, {1, 1}, 6);
    auto regular = depthwise.hardswish().conv2d(w, std::nullopt, {1, 1}, {1, 1});
    return std::vector<GraphTensor>{depthwise, strided, regular};
  }, {{}, {}, {}}, true, 1e-4);
}

// A kernel that reads nothing (here a matrix made from indexes, the GEMM's B) runs on the
// first execute only, into a buffer outside the arena, which later steps may reuse.
TEST(CpuBackend, KernelsThatReadNothingRunOnceOutsideTheArena) {
  constexpr int64_t kN = 256;
  Graph cx;
  auto x = cx.tensor({3, kN});
  auto w = (cx.iota(Expression::index() % 7 - Expression::index() / kN % 5, {kN, kN}, DType::I32).cast(DType::F32) * 0.25);
  auto y = (x.matmul(w) + 1.0).exp2().output();
  auto cpu = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1));
  auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
  for (uint32_t run = 0; run < 3; ++run) {
    HostTensor t = varied(DType::F32, 3 * kN, 40 + run, run == 2);
    cpu.set_data(x, t);
    ref.set_data(x, t);
    cpu.execute({});
    ref.execute({});
    auto got = cpu.get(y).to_f64(), want = ref.get(y).to_f64();
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_TRUE(same_value(got[k], want[k], 1e-4)) << "run " << run << " element " << k << ": " << got[k] << " instead of " << want[k];
  }
  EXPECT_LT(cpu.last_arena_bytes(), kN * kN * 4) << "the index matrix should not be in the arena";
}

TEST(CpuBackend, FusedNormsAndSoftmax) {
  check("softmax / norms", [](Graph& cx, std::vector<GraphTensor>& in) {
    auto x = cx.tensor({6, 33});
    auto w = cx.tensor({33});
    in = {x, w};
    return std::vector<GraphTensor>{x.softmax(1), x.rms_norm(1, w, 1e-5), x.layer_norm(1, std::nullopt, std::nullopt, 1e-5), x.gelu_tanh(), x.silu()};
  }, {{}}, /*specials=*/false);
}

TEST(CpuBackend, MatmulLayouts) {
  check("matmul layouts", [](Graph& cx, std::vector<GraphTensor>& in) {
    auto a = cx.tensor({17, 31});
    auto b = cx.tensor({31, 9});
    auto bt = cx.tensor({9, 31});
    auto at = cx.tensor({31, 17});
    auto ba = cx.tensor({3, 17, 31});
    auto bb = cx.tensor({3, 31, 9});
    in = {a, b, bt, at, ba, bb};
    return std::vector<GraphTensor>{a.matmul(b), a.matmul(bt.t()), at.t().matmul(b), ba.matmul(bb), ba.matmul(b),
                                    a.linear(bt)};
  }, {{}}, /*specials=*/false, 1e-4);
}

// Batched matmuls of rank 4 and more, as attention builds them: grouped-query attention
// (the key/value heads broadcast over each group, so the Mul is rank 5), keys transposed,
// sequence lengths symbolic (s = 1 folds each group into the rows of one GEMM), and
// outer batch axes that run as a loop. The cheapest program (search limit 1) uses the GEMM
// ops for every matmul; verification is off, so a wrong GEMM cannot be replaced by the
// unrewritten program.
// Persisted weights are packed once for the GEMM; new data for a weight (set_data) must
// replace its packed copy. F32 weights (our GEMM or OpenBLAS) and BF16 weights (our GEMM,
// converted while packing), m = 37 so the blocked path packs; the same runtime before and
// after each change, against the reference on the same data. The packed bytes show that
// new data drops the old copies (without that, stale copies would pile up to the budget).
TEST(CpuBackend, PersistedWeightsRepackedAfterSetData) {
  for (DType wdt : {DType::F32, DType::BF16}) {
    Graph cx;
    auto x = cx.tensor({37, 70});
    auto w = cx.tensor({70, 45}, wdt).persist();
    auto wt = cx.tensor({45, 70}, wdt).persist();  // a Linear weight: B transposed
    auto y = x.matmul(w.cast(DType::F32)).output();
    auto z = x.linear(wt.cast(DType::F32)).output();
    // The cheapest program, unverified (a wrong result fails below): with BF16 weights,
    // CpuGemm reading them directly.
    auto cpu = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1).trials(1).verify(VerifyMode::Never));
    auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
    uint32_t seed = 40;
    for (int round = 0; round < 4; ++round) {
      // Rounds 0 and 2 give the weights new values; 1 and 3 reuse them (packed copies).
      if (round % 2 == 0) {
        HostTensor wv = varied(wdt, 70 * 45, seed++, false), wtv = varied(wdt, 45 * 70, seed++, false);
        cpu.set_data(w, wv);
        ref.set_data(w, wv);
        cpu.set_data(wt, wtv);
        ref.set_data(wt, wtv);
      }
      HostTensor xv = varied(DType::F32, 37 * 70, seed++, false);
      cpu.set_data(x, xv);
      ref.set_data(x, xv);
      const int64_t packed_before = cpu.packed_weight_bytes();
      cpu.execute(cx.dim_map());
      ref.execute(cx.dim_map());
      // Both weights are packed once: new data drops the old copies, reuse adds nothing.
      if (round % 2 == 0) {
        EXPECT_EQ(packed_before, 0) << dtype_name(wdt) << " round " << round;
      } else {
        EXPECT_EQ(cpu.packed_weight_bytes(), packed_before) << dtype_name(wdt) << " round " << round;
      }
      if (wdt == DType::BF16) {
        EXPECT_GT(cpu.packed_weight_bytes(), 0);  // our GEMM, blocked path
      }
      for (const auto& out : {y, z}) {
        auto got = cpu.get(out).to_f64(), want = ref.get(out).to_f64();
        ASSERT_EQ(got.size(), want.size());
        for (size_t k = 0; k < got.size(); ++k)
          ASSERT_TRUE(same_value(got[k], want[k], 1e-4))
              << dtype_name(wdt) << " round " << round << " element " << k << ": " << got[k] << " instead of " << want[k];
      }
    }
  }
}

// q, k and v projections of one x over persisted half-precision weights (our GEMM reads
// those): the program puts them in a row and runs them as one gemm_group (A packed once),
// and they match the reference at row counts on both sides of the GEMV path (7 rows: each
// reads its weight in place, no group), with another product of x^T in between.
TEST(CpuBackend, SiblingMatmulsRunAsOneGroup) {
  for (DType wdt : {DType::BF16, DType::F16}) {
    Graph cx;
    auto x = cx.tensor({Expression::var("seq"), 300});
    auto wq = cx.tensor({256, 300}, wdt).persist(), wk = cx.tensor({64, 300}, wdt).persist();
    auto wv = cx.tensor({64, 300}, wdt).persist();
    auto q = x.linear(wq.cast(DType::F32));
    auto k = x.linear(wk.cast(DType::F32));
    auto gram = x.transpose(0, 1).matmul(x);  // reads x too, in another layout: no sibling
    auto v = x.linear(wv.cast(DType::F32));
    std::vector<GraphTensor> outs = {q.output(), (k * 2.0).output(), gram.output(), v.exp().output()};
    cx.set_dim("seq", 40);
    auto cpu = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1).trials(1).verify(VerifyMode::Never));
    auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
    uint32_t seed = 90;
    for (GraphTensor w : {wq, wk, wv}) {
      HostTensor t = varied(wdt, static_cast<size_t>(w.numel().eval({})), seed++, false);
      cpu.set_data(w, t);
      ref.set_data(w, t);
    }
    for (int64_t rows : {40, 7, 100}) {
      HostTensor xv = varied(DType::F32, static_cast<size_t>(rows * 300), seed++, true);
      cpu.set_data(x, xv);
      ref.set_data(x, xv);
      cpu.execute({{"seq", rows}});
      ref.execute({{"seq", rows}});
      for (size_t o = 0; o < outs.size(); ++o) {
        auto got = cpu.get(outs[o]).to_f64(), want = ref.get(outs[o]).to_f64();
        ASSERT_EQ(got.size(), want.size());
        for (size_t e = 0; e < got.size(); ++e)
          ASSERT_TRUE(same_value(got[e], want[e], 1e-4)) << dtype_name(wdt) << " rows " << rows << " output " << o
                                                          << " element " << e << ": " << got[e] << " instead of " << want[e];
      }
    }
    EXPECT_EQ(cpu.gemms_grouped(), 4) << dtype_name(wdt);  // k and v with q, at 40 and 100 rows
  }
}

// State the program itself updates (a KV cache) changes every run: a GEMM reading it as B
// never packs it (and no copy survives a run, whichever way the update is written back).
// Three runs against the reference, the state updated each time.
TEST(CpuBackend, UpdatedStateIsNeverPacked) {
  Graph cx;
  auto x = cx.tensor({37, 70});
  auto w = cx.tensor({70, 45}, DType::BF16).persist();
  auto y = x.matmul(w.cast(DType::F32)).output();
  cx.update(w, w * -0.5);  // in BF16: the matmul alone reads the cast
  auto cpu = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1).trials(1).verify(VerifyMode::Never));
  auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
  HostTensor wv = varied(DType::BF16, 70 * 45, 7, false);
  cpu.set_data(w, wv);
  ref.set_data(w, wv);
  for (int round = 0; round < 3; ++round) {
    HostTensor xv = varied(DType::F32, 37 * 70, 8 + round, false);
    cpu.set_data(x, xv);
    ref.set_data(x, xv);
    cpu.execute(cx.dim_map());
    ref.execute(cx.dim_map());
    EXPECT_EQ(cpu.packed_weight_bytes(), 0) << "round " << round;
    auto got = cpu.get(y).to_f64(), want = ref.get(y).to_f64();
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_TRUE(same_value(got[k], want[k], 1e-4)) << "round " << round << " element " << k << ": " << got[k]
                                                     << " instead of " << want[k];
  }
}

TEST(CpuBackend, AttentionMatmulsOfRankFiveAndMore) {
  auto build = [](Graph& cx, std::vector<GraphTensor>& in) {
    const Expression s = Expression::var("s"), t = Expression::var("t");
    auto q = cx.tensor({s, 6, 8});  // (seq, heads, head_dim), 2 kv heads x 3 groups
    auto k = cx.tensor({t, 2, 8});
    auto v = cx.tensor({t, 2, 8});
    auto x = cx.tensor({2, 3, 2, 4, 5});
    auto y = cx.tensor({2, 3, 2, 5, 7});
    auto yb = cx.tensor({3, 1, 5, 7});
    auto u = cx.tensor({5, 3, 2, 4});
    auto w = cx.tensor({3, 1, 4, 7});
    in = {q, k, v, x, y, yb, u, w};
    // Merged after a permute, then split another way: a view that is not linear, which
    // the GEMM reads through a contiguous copy.
    auto scrambled = u.permute({2, 1, 0, 3}).reshape({6, 5, 4}).reshape({3, 2, 5, 4});
    auto qh = q.reshape({s, 2, 3, 8}).permute({1, 2, 0, 3});  // (2, 3, s, 8)
    auto kt = k.permute({1, 2, 0}).unsqueeze(1);               // (2, 1, 8, t)
    auto vh = v.permute({1, 0, 2}).unsqueeze(1);               // (2, 1, t, 8)
    auto scores = qh.matmul(kt);                               // (2, 3, s, t)
    auto out = (scores * 0.3).matmul(vh);                      // (2, 3, s, 8)
    return std::vector<GraphTensor>{scores, out, x.matmul(y), x.matmul(yb), scrambled.matmul(w)};
  };
  check("attention matmuls", build, {{{"s", 1}, {"t", 9}}, {{"s", 5}, {"t", 5}}, {{"s", 1}, {"t", 1}}},
        /*specials=*/false, 1e-4, CompileOptions().search_graph_limit(1).trials(1).verify(VerifyMode::Never));
  check("attention matmuls, searched", build, {{{"s", 4}, {"t", 11}}, {{"s", 1}, {"t", 3}}}, /*specials=*/true, 1e-4);
}

TEST(CpuBackend, SymbolicDimsRunWithoutRecompiling) {
  check("symbolic seq", [](Graph& cx, std::vector<GraphTensor>& in) {
    Expression seq = Expression::var("seq");
    auto x = cx.tensor({seq, 8});
    auto w = cx.tensor({8, 8});
    in = {x, w};
    return std::vector<GraphTensor>{x.matmul(w).softmax(1), (x * 2.0).sum({0})};
  }, {{{"seq", 5}}, {{"seq", 11}}, {{"seq", 1}}}, /*specials=*/false);
}

TEST(CpuBackend, GatherAndEmbedding) {
  check("embedding", [](Graph& cx, std::vector<GraphTensor>& in) {
    auto table = cx.tensor({10, 6});
    auto ids = cx.tensor({4}, DType::I32);
    in = {table, ids};
    return std::vector<GraphTensor>{table.embedding(ids + 3)};
  }, {{}}, false);
}

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

// An index past its own axis is an error on the CPU backend too, even when the flat index
// lands inside the tensor (the next row), in the reference runtime's words (issue 12).
TEST(CpuBackend, IndexPastItsAxisIsAnError) {
  const CompileOptions o = CompileOptions().search_graph_limit(4).trials(1);
  {  // gather along dim 1 with index 2: flat 4 is row 2, inside the tensor
    Graph cx;
    auto d = cx.tensor({3, 2});
    auto i = cx.tensor({3, 1}, DType::I64);
    auto out = (d.gather(1, i) * 2.0).output();
    auto rt = cx.compile(cpu::CpuRuntime{}, o);
    rt.set_data(d, {0.5f, -1.f, 2.f, 3.f, -4.f, 5.f});
    rt.set_data(i, std::vector<int64_t>{1, 2, 0});
    EXPECT_EQ(error_of([&] { rt.execute(cx.dim_map()); }),
              "gather: index 2 is out of range for dimension 1 of size 2 (at position [1, 0] of the index)");
    rt.set_data(d, {0.5f, -1.f, 2.f, 3.f, -4.f, 5.f});
    rt.set_data(i, std::vector<int64_t>{1, 0, 1});
    rt.execute(cx.dim_map());
    EXPECT_EQ(rt.get_f32(out), (std::vector<float>{-2.f, 4.f, 10.f}));
  }
  {  // embedding: id 4 of a 4-row table (flat 12..14: past the table) and index_select with -1
    Graph cx;
    auto table = cx.tensor({4, 3}).persist();
    auto ids = cx.tensor({2, 3}, DType::I32);
    table.embedding(ids).output();
    auto rt = cx.compile(cpu::CpuRuntime{}, o);
    std::vector<float> t(12);
    for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<float>(k) - 5.5f;
    rt.set_data(table, t);
    rt.set_data(ids, {0, 3, 1, 2, 4, 0});
    EXPECT_EQ(error_of([&] { rt.execute(cx.dim_map()); }),
              "embedding: index 4 is out of range for dimension 0 of size 4 (at position 4 of the index)");
    Graph g2;
    auto tb = g2.tensor({4, 3}).persist();
    auto sel = g2.tensor({3}, DType::I64);
    tb.index_select(1, sel).output();
    auto rt2 = g2.compile(cpu::CpuRuntime{}, o);
    rt2.set_data(tb, t);
    rt2.set_data(sel, std::vector<int64_t>{2, 3, 0});  // 3 is past dimension 1 (size 3), flat inside
    EXPECT_EQ(error_of([&] { rt2.execute(g2.dim_map()); }),
              "index_select: index 3 is out of range for dimension 1 of size 3 (at position 1 of the index)");
  }
  {  // scatter along dim 1 with index 2 at [1, 0] would write into row 2
    Graph cx;
    auto dest = cx.tensor({3, 2});
    auto idx = cx.tensor({2, 2}, DType::I32);
    auto src = cx.tensor({2, 2});
    dest.scatter(1, idx, src).output();
    auto rt = cx.compile(cpu::CpuRuntime{}, o);
    rt.set_data(dest, {0.f, 1.f, 2.f, 3.f, 4.f, 5.f});
    rt.set_data(src, {-1.f, -2.f, -3.f, -4.f});
    rt.set_data(idx, {1, 0, 2, 1});
    EXPECT_EQ(error_of([&] { rt.execute(cx.dim_map()); }),
              "scatter: index 2 is out of range for dimension 1 of size 2 (at position [1, 0] of the index)");
  }
}

TEST(CpuBackend, TransformerBlockMatchesReference) {
  luminal::testing::TestModel m;
  luminal::testing::build_transformer_block(m);
  auto cpu = m.cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(20).trials(1));
  ReferenceRuntime ref;
  std::vector<NodeId> ids(m.cx.size());
  for (NodeId i = 0; i < ids.size(); ++i) ids[i] = i;
  ref.load(m.cx, ids);
  luminal::testing::fill_random(cpu, m);
  luminal::testing::fill_random(ref, m);
  cpu.execute(m.cx.dim_map());
  ref.execute(m.cx.dim_map());
  auto got = cpu.get_f32(m.outputs[0]), want = ref.get_f32(m.outputs[0]);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], want[k], 1e-4 * (1 + std::abs(want[k]))) << k;
}

namespace {
// x * x, with a reference implementation, and a native CPU one that counts its calls.
struct Square : CustomOp {
  std::string name() const override { return "square"; }
  HostTensor execute_reference(std::span<const HostTensor> in, const std::vector<int64_t>&, DType dt) const override {
    HostTensor out = HostTensor::zeros(dt, in[0].numel());
    for (size_t k = 0; k < in[0].numel(); ++k) out.set_f64(k, in[0].get_f64(k) * in[0].get_f64(k));
    return out;
  }
};
struct NativeSquare : Square, cpu::CustomKernel {
  mutable int calls = 0;
  void run_cpu(std::span<const void* const> in, std::span<const std::vector<int64_t>> shapes, void* out,
               const std::vector<int64_t>&) const override {
    ++calls;
    size_t n = 1;
    for (auto s : shapes[0]) n *= static_cast<size_t>(s);
    const float* x = static_cast<const float*>(in[0]);
    for (size_t k = 0; k < n; ++k) static_cast<float*>(out)[k] = x[k] * x[k];
  }
};
}  // namespace

TEST(CpuBackend, CustomOpsRunNativelyOrThroughTheirReference) {
  for (bool native : {false, true}) {
    auto op = native ? std::shared_ptr<Square>(std::make_shared<NativeSquare>()) : std::make_shared<Square>();
    Graph cx;
    auto x = cx.tensor({3, 5});
    auto y = cx.custom_op(op, {x.t()}, {5, 3}, DType::F32).output();  // read through a transposed view
    auto rt = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(2).trials(1));
    std::vector<float> v = {-2, 1.5f, 0, 3, -1, 4, 2, -0.5f, 7, 1, -3, 2.5f, 6, -4, 0.25f};
    rt.set_data(x, v);
    rt.execute(cx.dim_map());
    auto got = rt.get_f32(y);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(got[i * 3 + j], v[j * 5 + i] * v[j * 5 + i]) << i << "," << j;
    if (native) {
      EXPECT_GE(static_cast<NativeSquare*>(op.get())->calls, 1);
    }
  }
}

// A KV-cache append (scatter into a persisted cache, written back with Graph::update) runs
// in place: the arena holds no copy of the cache, and step after step the cache and the
// attention-like reads of it match the reference. With a second reader of the old cache
// the update is not in place, and still right.
TEST(CpuBackend, CacheAppendRunsInPlace) {
  for (bool second_reader : {false, true}) {
    const int64_t max_seq = 64, heads = 3, dim = 5;
    Graph cx;
    auto [cache, rows, outs, update] = luminal::testing::build_cache_append(cx, max_seq, heads, dim, second_reader);
    auto cpu = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(4).trials(1));
    auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
    HostTensor start = varied(DType::F32, static_cast<size_t>(max_seq * heads * dim), 7, false);
    cpu.set_data(cache, start);
    ref.set_data(cache, start);
    int64_t pos = 0;
    uint32_t seed = 11;
    for (int64_t len : {5, 1, 1, 3, 1, 7, 1}) {
      DimMap dims{{"p", pos}, {"s", len}};
      HostTensor r = varied(DType::F32, static_cast<size_t>(len * heads * dim), seed++, true);
      cpu.set_data(rows, r);
      ref.set_data(rows, r);
      cpu.execute(dims);
      ref.execute(dims);
      std::vector<GraphTensor> checked = outs;
      checked.push_back(cache);
      checked.push_back(update);  // the update Output reads as the new cache
      for (const auto& t : checked) {
        auto got = cpu.get(t).to_f64(), want = ref.get(t).to_f64();
        ASSERT_EQ(got.size(), want.size());
        for (size_t k = 0; k < got.size(); ++k)
          ASSERT_TRUE(same_value(got[k], want[k], 1e-5))
              << "second reader " << second_reader << ", position " << pos << ", element " << k << ": " << got[k]
              << " instead of " << want[k];
      }
      // The appended rows are in the cache (an expectation independent of the reference).
      auto cached = cpu.get(cache).to_f64(), appended = r.to_f64();
      for (size_t k = 0; k < appended.size(); ++k)
        ASSERT_TRUE(same_value(cached[static_cast<size_t>(pos * heads * dim) + k], appended[k], 0))
            << "second reader " << second_reader << ", position " << pos << ": appended element " << k << " is "
            << cached[static_cast<size_t>(pos * heads * dim) + k] << " in the cache instead of " << appended[k];
      if (!second_reader) {  // no cache-sized buffer in the arena: the scatter wrote the cache itself
        EXPECT_LT(cpu.last_arena_bytes(), max_seq * heads * dim * 4) << "position " << pos;
      }
      pos += len;
    }
  }
}

// Outputs that read their producer whole are written by the producer straight into the
// tensor the user receives (a spare recycled from the previous run, no copy out of the
// arena). Checked: repeated runs, a producer another kernel reads too, one tensor output
// twice, and a run that fails (an id past the table) leaving every previous result intact.
TEST(CpuBackend, OutputsWrittenInPlaceSurviveRepeatsAndErrors) {
  Graph cx;
  auto x = cx.tensor({5, 7});
  auto ids = cx.tensor({3}, DType::I32);
  GraphTensor e = (x * 0.5).exp();
  std::vector<GraphTensor> outs = {e.output(), e.output(), (e * 3.0 + x).output(), x.embedding(ids).output(),
                                   x.sum({1}).output()};
  auto cpu = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(4).trials(1));
  auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
  auto run_both = [&](uint32_t seed, std::vector<int32_t> id_values) {
    HostTensor t = varied(DType::F32, 35, seed, true);
    for (Runtime* rt : {static_cast<Runtime*>(&cpu), static_cast<Runtime*>(&ref)}) {
      rt->set_data(x, t);
      rt->set_data(ids, id_values);
    }
    cpu.execute(cx.dim_map());
    ref.execute(cx.dim_map());
  };
  auto expect_same = [&](const std::string& when) {
    for (size_t o = 0; o < outs.size(); ++o) {
      auto got = cpu.get(outs[o]).to_f64(), want = ref.get(outs[o]).to_f64();
      ASSERT_EQ(got.size(), want.size()) << when << ", output " << o;
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_TRUE(same_value(got[k], want[k], 1e-5))
            << when << ", output " << o << " element " << k << ": " << got[k] << " instead of " << want[k];
    }
  };
  run_both(21, {0, 4, 2});
  expect_same("run 1");
  std::vector<std::vector<double>> before;
  for (const auto& o : outs) before.push_back(cpu.get(o).to_f64());
  cpu.set_data(x, varied(DType::F32, 35, 22, true));
  cpu.set_data(ids, std::vector<int32_t>{1, 5, 0});
  EXPECT_NE(error_of([&] { cpu.execute(cx.dim_map()); }), "<no error>");
  for (size_t o = 0; o < outs.size(); ++o) {  // still run 1's values, bit for bit
    auto now = cpu.get(outs[o]).to_f64();
    ASSERT_EQ(now.size(), before[o].size()) << "output " << o << " after the failed run";
    for (size_t k = 0; k < now.size(); ++k)
      ASSERT_TRUE(same_value(now[k], before[o][k], 0)) << "output " << o << " element " << k << " after the failed run";
  }
  for (uint32_t seed : {23u, 24u, 25u}) {
    run_both(seed, {static_cast<int32_t>(seed % 5), 3, 1});
    expect_same("run with seed " + std::to_string(seed));
  }
}
