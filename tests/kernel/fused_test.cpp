// Fused regions (elementwise chains, softmax, RMSNorm, layer norm, mean/var, gather +
// elementwise, matmul), the fuse API, what lowering refuses, determinism and the text form.
#include <bit>
#include <optional>
#include <sstream>

#include "harness.hpp"
#include "luminal/kernel/fusion.hpp"

namespace luminal::kernel::testing {
namespace {

const Expression kSeq = Expression::var("seq");
const std::vector<DimMap> kSeqDims = {{{"seq", 3}}, {{"seq", 9}}};

HostTensor plain_data(size_t, DType dt, size_t n, std::mt19937& rng) { return random_tensor(dt, n, rng, false, false); }

TEST(KernelFused, ReductionsWithProducersAndConsumers) {
  Batch batch;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    std::string d(dtype_name(dt));
    {
      Graph cx;
      auto x = cx.tensor({kSeq, 6}, dt);
      auto y = cx.tensor({6}, dt);
      auto xt = cx.tensor({6, kSeq}, dt).permute({1, 0});
      ((x * y.expand({kSeq, 6})).exp2() + xt.sin() * 0.5 - x.sqrt()).output();
      batch.add("elementwise chain " + d, Region{cx}, kSeqDims);
    }
    {
      Graph cx;
      cx.tensor({kSeq, 13}, dt).softmax(1).output();
      batch.add("softmax " + d, Region{cx}, kSeqDims, plain_data);
    }
    {
      Graph cx;
      auto x = cx.tensor({kSeq, 16}, dt);
      auto w = cx.tensor({16}, dt);
      x.rms_norm(1, w).output();
      batch.add("rms norm " + d, Region{cx}, kSeqDims, plain_data);
    }
    {
      Graph cx;
      auto x = cx.tensor({kSeq, 10}, dt);
      x.layer_norm(1, cx.tensor({10}, dt), cx.tensor({10}, dt)).output();
      batch.add("layer norm " + d, Region{cx}, kSeqDims, plain_data);
    }
  }
  {
    Graph cx;
    auto x = cx.tensor({kSeq, 7});
    (x.mean({1}) + x.var({1})).output();
    batch.add("mean + var", Region{cx}, kSeqDims, plain_data);
  }
  {
    Graph cx;
    cx.tensor({4, kSeq, 5}).mean({1, 2}).output();  // nested reductions
    batch.add("mean over two axes", Region{cx}, kSeqDims, plain_data);
  }
  {
    Graph cx;
    auto a = cx.tensor({5, 7});
    auto b = cx.tensor({7, kSeq});
    a.matmul(b).output();
    batch.add("matmul", Region{cx}, kSeqDims, plain_data);
  }
  {
    Graph cx;
    cx.tensor({kSeq, 11}).softmax(1).output();
    batch.add("softmax with inf and NaN", Region{cx}, kSeqDims);
  }
  {
    Graph cx;  // the region's Output reads a padded, flipped view
    auto x = cx.tensor({kSeq, 4});
    ((x * -0.5).exp2().pad(0, 1, 2) * 3.0).flip({0, 1}).output();
    batch.add("padded and flipped result", Region{cx}, kSeqDims);
  }
  {
    Graph cx;
    auto x = cx.tensor({kSeq});
    (x / x.sum_all()).output();  // a full reduction, computed once (rows = 1)
    batch.add("x / sum(x)", Region{cx}, kSeqDims, plain_data);
  }
  for (DType dt : {DType::F32, DType::BF16, DType::I32}) {
    // Embedding lookup, then elementwise.
    Graph cx;
    auto table = cx.tensor({9, 4}, dt);
    auto ids = cx.tensor({kSeq, 4}, DType::I64);
    ((table.gather(0, ids) * 3.0) + 1.0).output();
    batch.add("gather + elementwise " + std::string(dtype_name(dt)), Region{cx}, kSeqDims,
              [](size_t input, DType t, size_t n, std::mt19937& rng) {
                if (input == 0) return random_tensor(t, n, rng);
                HostTensor h = HostTensor::zeros(t, n);
                for (size_t i = 0; i < n; ++i) h.set_i64(i, static_cast<int64_t>(rng() % 9));
                return h;
              });
  }
  batch.run(test_compiler());
}

// Per-row reductions stay per row: the softmax kernel has two row reductions and none inside the column loop.
TEST(KernelFused, SoftmaxIsThreePassesPerRow) {
  Graph cx;
  cx.tensor({kSeq, 13}).softmax(1).output();
  auto k = lower(Region{cx});
  ASSERT_TRUE(k);
  ASSERT_EQ(k->phases.size(), 1u);
  const Phase& p = k->phases[0];
  EXPECT_EQ(p.rows, kSeq);
  EXPECT_EQ(p.cols, Expression(13));
  EXPECT_EQ(k->geometry, Geometry::WarpPerRow);
  auto count_reduces = [](const std::vector<Stmt>& stmts, auto&& self) -> int {
    int n = 0;
    for (const auto& s : stmts) n += (s.kind == StmtKind::Reduce) + self(s.body, self);
    return n;
  };
  EXPECT_EQ(count_reduces(p.row_body, count_reduces), 2);  // max, then sum (max not recomputed inside it)
  EXPECT_EQ(count_reduces(p.col_body, count_reduces), 0);
}

int count_stmts(const std::vector<Stmt>& stmts, StmtKind kind, std::optional<OpKind> op = std::nullopt) {
  int n = 0;
  for (const auto& s : stmts) n += (s.kind == kind && (!op || s.op == *op)) + count_stmts(s.body, kind, op);
  return n;
}

// Structurally identical nodes compute one value: an extracted program can hold several
// copies of a reduction (softmax's max once per consumer, layer norm's mean three times),
// and each copy used to be its own pass over the row. Nodes that differ only in a
// constant's bits (0.0 and -0.0), a view or a reduction's axis stay apart (an elementwise
// node's axis is only a label).
TEST(KernelFused, IdenticalNodesAreComputedOnce) {
  {
    Graph cx;  // softmax built with two copies of the max and of exp(x - max)
    auto x = cx.tensor({kSeq, 13});
    auto e1 = (x - x.max({1}, true)).exp();
    auto e2 = (x - x.max({1}, true)).exp();
    (e1 / e2.sum({1}, true)).output();
    auto k = lower(Region{cx});
    ASSERT_TRUE(k);
    const Phase& p = k->phases[0];
    EXPECT_EQ(count_stmts(p.row_body, StmtKind::Reduce), 2);  // one max, one sum
    EXPECT_EQ(count_stmts(p.col_body, StmtKind::Alu, OpKind::Exp2), 0);  // exp read back from the row scratch
    EXPECT_EQ(count_stmts(p.col_body, StmtKind::Unstash), 1);
  }
  {
    Graph cx;  // the same, with one copy's elementwise nodes labelled with another axis (as rewrites leave them)
    auto x = cx.tensor({kSeq, 13});
    const NodeId first = static_cast<NodeId>(cx.size());
    auto e1 = (x - x.max({1}, true)).exp();
    for (NodeId i = first; i < cx.size(); ++i) {
      Node& n = cx.mutable_node(i);
      if (op_category(n.op) == OpCategory::Unary || op_category(n.op) == OpCategory::Binary) n.axis = i % 2 ? 0 : -1;
    }
    auto e2 = (x - x.max({1}, true)).exp();
    (e1 / e2.sum({1}, true)).output();
    auto k = lower(Region{cx});
    ASSERT_TRUE(k);
    const Phase& p = k->phases[0];
    EXPECT_EQ(count_stmts(p.row_body, StmtKind::Reduce), 2);
    EXPECT_EQ(count_stmts(p.col_body, StmtKind::Alu, OpKind::Exp2), 0);
    EXPECT_EQ(count_stmts(p.col_body, StmtKind::Unstash), 1);
  }
  {
    Graph cx;  // three copies of one mean
    auto x = cx.tensor({kSeq, 10});
    ((x - x.mean({1}, true)) * (x - x.mean({1}, true)) + x.mean({1}, true)).output();
    auto k = lower(Region{cx});
    ASSERT_TRUE(k);
    EXPECT_EQ(count_stmts(k->phases[0].row_body, StmtKind::Reduce), 1);
  }
  {
    Graph cx;  // max and sum of one row, and a max over another view: three reductions
    auto x = cx.tensor({kSeq, 6});
    (x - (x.max({1}, true) + x.sum({1}, true) + x.flip({1}).max({1}, true) * 2.0)).output();
    auto k = lower(Region{cx});
    ASSERT_TRUE(k);
    EXPECT_EQ(count_stmts(k->phases[0].row_body, StmtKind::Reduce), 3);
  }
  Batch batch;
  {
    Graph cx;
    auto x = cx.tensor({kSeq, 13});
    auto e1 = (x - x.max({1}, true)).exp();
    auto e2 = (x - x.max({1}, true)).exp();
    (e1 / e2.sum({1}, true)).output();
    batch.add("softmax from duplicated nodes", Region{cx}, kSeqDims);
  }
  {
    Graph cx;  // copies that must stay apart: constants that differ in sign only (merged: NaN, not inf)
    auto x = cx.tensor({kSeq, 5});
    ((x * 0.0).reciprocal() - (x * -0.0).reciprocal()).output();
    batch.add("near-duplicates: signed zeros", Region{cx}, kSeqDims);
  }
  {
    Graph cx;  // ... or in value (merged: 0)
    auto x = cx.tensor({kSeq, 5});
    ((x * 2.0).exp2() - (x * 3.0).exp2()).output();
    batch.add("near-duplicates: constants", Region{cx}, kSeqDims);
  }
  batch.run(test_compiler());
}

// The emitted C++ helpers' lm_exp2f beside another exp2 of theirs (`fast`), compiled as
// one probe: fn(bits, exact, fast, n) writes both results' bits for every input pattern.
using Exp2Probe = void(const unsigned*, unsigned*, unsigned*, long long);
Exp2Probe* exp2_probe(const std::string& fast, std::shared_ptr<const SharedLibrary>& keep) {
  Graph probe_graph;
  (probe_graph.tensor({kSeq}) * 2.0).output();
  auto probe_kernel = lower(Region{probe_graph});
  if (!probe_kernel) return nullptr;
  const std::string probe = emit_cpp(*probe_kernel, "k") + R"(
extern "C" void lm_probe(const unsigned* bits, unsigned* exact, unsigned* fast, long long n) {
  for (long long i = 0; i < n; ++i) {
    exact[i] = lm_f2u_(lm_exp2f(lm_u2f_(bits[i])));
    fast[i] = lm_f2u_()" + fast + R"((lm_u2f_(bits[i])));
  }
})";
  keep = test_compiler().compile(probe);
  return keep->function<Exp2Probe>("lm_probe");
}

// Sums of 64 or more exp2s (softmax) compute them by lm_exp2f_or_nan where a NaN would
// reach the sum, and a sum that comes out NaN again with lm_exp2f. The helper itself: the
// bits of lm_exp2f for |x| < 126 and x <= -151, NaN for the rest (a strided sweep of all
// patterns and every pattern in windows around the edges of its ranges).
TEST(KernelFused, SumsOfExponentialsTakeTheShortExp2AndRedoNaNs) {
  std::shared_ptr<const SharedLibrary> lib;
  auto* fn = exp2_probe("lm_exp2f_or_nan", lib);
  ASSERT_TRUE(fn);
  std::vector<unsigned> bits;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) bits.push_back(static_cast<unsigned>(b));
  for (float edge : {0.0f, 125.5f, 126.0f, 126.5f, 127.5f, 128.0f, -149.0f, -150.0f, -150.5f, -151.0f, 1e30f})
    for (float sign : {1.0f, -1.0f}) {
      const auto at = std::bit_cast<uint32_t>(edge * sign);
      for (uint32_t d = 0; d < (1u << 16); ++d) bits.push_back(at - (1u << 15) + d);
    }
  for (uint32_t special : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u}) bits.push_back(special);
  std::vector<unsigned> exact(bits.size()), fast(bits.size());
  fn(bits.data(), exact.data(), fast.data(), static_cast<long long>(bits.size()));
  size_t in_range = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    const float x = std::bit_cast<float>(bits[i]);
    if (std::fabs(x) < 126.0f || x <= -151.0f) {
      ++in_range;
      ASSERT_EQ(fast[i], exact[i]) << "x = " << x << " (0x" << std::hex << bits[i] << ")";
    } else {
      ASSERT_TRUE(std::isnan(std::bit_cast<float>(fast[i]))) << "x = " << x << " (0x" << std::hex << bits[i] << ")";
    }
  }
  EXPECT_GT(in_range, bits.size() / 3);

  // Emitted: where the exponential's NaN reaches the sum, and not through a comparison.
  auto source_of = [](const Graph& g) {
    auto k = lower(Region{g});
    EXPECT_TRUE(k);
    return k ? emit_cpp(*k, "k") : std::string();
  };
  auto uses_short_exp2 = [](const std::string& src) {
    return src.substr(src.find("extern \"C\" void k(")).find("lm_exp2f_or_nan(") != std::string::npos;
  };
  const Expression cols = Expression::var("cols");
  const std::vector<DimMap> dims = {{{"cols", 64}}, {{"cols", 131}}, {{"cols", 63}}, {{"cols", 300}}};
  // Rows of every kind: plain; one element past the short range (overflow, 102..128, NaN);
  // all masked (-inf) but one; exponentials of subnormal size whose sum, scaled by 2^120
  // afterwards, must match.
  auto rows = [](size_t, DType dt, size_t n, std::mt19937& rng) {
    HostTensor t = random_tensor(dt, n, rng, false, false);
    const double inf = std::numeric_limits<double>::infinity();
    const double odd[] = {130.0, 126.0, 127.9, std::nan(""), inf, -inf, -126.7, -149.3, -150.2, -151.0, -1e30, 125.9};
    for (size_t i = 0; i < n; ++i) {
      const size_t row = i / 17;  // rows and columns cross with any cols value
      if (row % 5 == 1 && i % 17 == 3) t.set_f64(i, odd[(i / 17) % 12]);
      if (row % 5 == 2) t.set_f64(i, i % 17 == 0 ? 0.5 : -inf);
      if (row % 5 == 3) t.set_f64(i, -126.0 - static_cast<double>(i % 29));
    }
    return t;
  };
  Batch batch;
  {
    Graph cx;
    cx.tensor({5, cols}).softmax(1).output();
    EXPECT_TRUE(uses_short_exp2(source_of(cx)));
    batch.add("softmax", Region{cx}, dims, rows);
  }
  {
    Graph cx;  // exp2 directly: subnormal terms count after the 2^120 scale
    (cx.tensor({7, cols}).exp2().sum({1}) * std::ldexp(1.0, 120)).output();
    EXPECT_TRUE(uses_short_exp2(source_of(cx)));
    batch.add("sum of exp2, scaled", Region{cx}, dims, rows);
  }
  for (DType dt : {DType::BF16, DType::F16}) {
    Graph cx;
    (cx.tensor({6, cols}, dt).exp2() * 0.5).sum({1}).output();
    EXPECT_TRUE(uses_short_exp2(source_of(cx)));
    batch.add("sum of exp2 in " + std::string(dtype_name(dt)), Region{cx}, dims, rows);
  }
  {
    Graph cx;  // a comparison drops the NaN: the exact exp2
    auto x = cx.tensor({4, cols});
    x.exp2().lt(0.5).cast(DType::F32).sum({1}).output();
    EXPECT_FALSE(uses_short_exp2(source_of(cx)));
    batch.add("count of small exp2", Region{cx}, dims, rows);
  }
  batch.run(test_compiler());
}

// A softmax's max pass keeps the row's minimum too; when the sum's exp2 arguments at the
// row's extremes lie in (-126, 126), its groups take lm_exp2f_in_range (no range checks).
// Rows on both sides of that bound, masked, NaN, infinite or with signed zeros, match the
// reference; lm_exp2f_in_range has lm_exp2f's bits on the whole range it is used on.
TEST(KernelFused, SoftmaxSumsCheckTheirExponentsRangeOncePerRow) {
  std::shared_ptr<const SharedLibrary> lib;
  auto* fn = exp2_probe("lm_exp2f_in_range", lib);
  ASSERT_TRUE(fn);
  std::vector<unsigned> bits;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(b));
    if (std::fabs(x) < 126.0f || std::isnan(x)) bits.push_back(static_cast<unsigned>(b));
  }
  for (float edge : {0.0f, 125.99f, 1e-30f})
    for (float sign : {1.0f, -1.0f}) {
      const auto at = std::bit_cast<uint32_t>(edge * sign);
      for (uint32_t d = 0; d < (1u << 16); ++d) {
        const float x = std::bit_cast<float>(at - (1u << 15) + d);
        if (std::fabs(x) < 126.0f) bits.push_back(at - (1u << 15) + d);
      }
    }
  std::vector<unsigned> exact(bits.size()), fast(bits.size());
  fn(bits.data(), exact.data(), fast.data(), static_cast<long long>(bits.size()));
  for (size_t i = 0; i < bits.size(); ++i) {
    const float x = std::bit_cast<float>(bits[i]);
    if (std::isnan(x)) ASSERT_TRUE(std::isnan(std::bit_cast<float>(fast[i]))) << std::hex << bits[i];
    else ASSERT_EQ(fast[i], exact[i]) << "x = " << x << " (0x" << std::hex << bits[i] << ")";
  }

  auto source_of = [](const Graph& g) {
    auto k = lower(Region{g});
    EXPECT_TRUE(k);
    if (!k) return std::string();
    const std::string src = emit_cpp(*k, "k");
    return src.substr(src.find("extern \"C\" void k("));
  };
  auto checks_range_once = [](const std::string& src) {
    return src.find("lm_exp2f_in_range(") != std::string::npos && src.find("lm_exp2f_or_nan(") != std::string::npos &&
           src.find("_lo = ") != std::string::npos;
  };
  const Expression cols = Expression::var("cols");
  const std::vector<DimMap> dims = {{{"cols", 64}}, {{"cols", 131}}, {{"cols", 300}}};
  // Row kinds (row % 8): spread 0..10 (in range); max - min just inside and just outside
  // 126 / log2 e (87.34); a masked score (-1e9); NaN; +inf; -inf; signed zeros and
  // subnormals only.
  auto rows = [](size_t, DType dt, size_t n, std::mt19937& rng) {
    HostTensor t = random_tensor(dt, n, rng, false, false);
    const double inf = std::numeric_limits<double>::infinity();
    std::uniform_real_distribution<double> u(-10.0, 0.0);
    for (size_t i = 0; i < n; ++i) {
      const size_t row = i / 29, col = i % 29;  // rows and columns cross with any cols value
      double v = u(rng);
      switch (row % 8) {
        case 1: v = col == 0 ? 0.0 : (col == 1 ? -87.3 : v); break;
        case 2: v = col == 0 ? 0.0 : (col == 1 ? -87.4 : v); break;
        case 3: v = col == 2 ? -1e9 : v; break;
        case 4: v = col == 5 ? std::nan("") : v; break;
        case 5: v = col == 7 ? inf : v; break;
        case 6: v = col == 7 ? -inf : v; break;
        case 7: v = col % 3 == 0 ? -0.0 : (col % 3 == 1 ? 0.0 : 1e-40); break;
        default: break;
      }
      t.set_f64(i, v);
    }
    return t;
  };
  Batch batch;
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    Graph cx;
    cx.tensor({16, cols}, dt).softmax(1).output();
    EXPECT_TRUE(checks_range_once(source_of(cx))) << dtype_name(dt);
    batch.add("softmax in " + std::string(dtype_name(dt)), Region{cx}, dims, rows);
  }
  {
    Graph cx;  // the same elements scaled by a negative factor: bounds from either end
    auto x = cx.tensor({16, cols});
    ((x * -0.5).exp2().sum({1}) + x.max({1})).output();
    batch.add("sum of exp2(-x / 2) beside max(x)", Region{cx}, dims, rows);
  }
  {
    Graph cx;  // x * x is not monotone in x: the checked exp2
    auto x = cx.tensor({16, cols});
    auto d = x - x.max({1}, true);
    (d * d).exp2().sum({1}).output();
    EXPECT_FALSE(checks_range_once(source_of(cx)));
    batch.add("sum of exp2((x - max)^2)", Region{cx}, dims, rows);
  }
  batch.run(test_compiler());
}

// -ffp-contract=off, except for Horner steps with constant coefficients: p*x + c with c a
// constant and p a constant or another such step is one fused multiply-add. Nothing else
// fuses, and special values come out as the reference computes them.
TEST(KernelFused, OnlyPolynomialStepsUseFusedMultiplyAdd) {
  auto fused_steps = [](const Graph& g) {
    auto k = lower(Region{g});
    EXPECT_TRUE(k);
    if (!k) return -1;
    std::string src = emit_cpp(*k, "k");
    src = src.substr(src.find("extern \"C\" void k("));  // the body (the helpers use LM_FMAF too)
    int n = 0;
    for (size_t at = src.find("LM_FMAF("); at != std::string::npos; at = src.find("LM_FMAF(", at + 1)) ++n;
    return n;
  };
  Batch batch;
  const std::vector<DimMap> dims = {{{"seq", 4}}};
  auto near_overflow = [](size_t input, DType dt, size_t n, std::mt19937& rng) {
    HostTensor t = random_tensor(dt, n, rng);
    const double edge[] = {3.0e20, 3.4028e20, 3.5e20, -3.5e20, 1e-40, -1e-45, 1e30, -0.0};
    if (input == 0)
      for (size_t i = 0; i < n; i += 3) t.set_f64(i, edge[(i / 3) % 8]);
    return t;
  };
  {
    Graph cx;  // a cubic in Horner form: three fused steps
    auto x = cx.tensor({kSeq, 7});
    (((x * 0.25 + 1.5) * x + -2.0) * x + 0.125).output();
    EXPECT_EQ(fused_steps(cx), 3);
    batch.add("cubic", Region{cx}, dims, near_overflow);
  }
  {
    Graph cx;  // coefficient 1e18 (below the 2^64 bound): products near FLT_MAX overflow fused or not
    auto x = cx.tensor({kSeq, 7});
    (x * 1e18 + 1.0).output();
    EXPECT_EQ(fused_steps(cx), 1);
    batch.add("affine near overflow", Region{cx}, dims, near_overflow);
  }
  {
    Graph cx;  // not polynomials with constant coefficients (or one past 2^64): unfused
    auto x = cx.tensor({kSeq, 7});
    auto y = cx.tensor({kSeq, 7});
    ((x * y + 1.0) + (x * 3.0 + y) + (x * 2.0 + 1e30) + (x * 1e30 + 2.0) + (x * x) * 0.5).output();
    EXPECT_EQ(fused_steps(cx), 0);
    batch.add("products that stay unfused", Region{cx}, dims, near_overflow);
  }
  {
    Graph cx;  // a step whose product is used twice keeps it rounded once for both
    auto x = cx.tensor({kSeq, 7});
    auto m = x * 0.75;
    ((m + 1.0) * m).output();
    EXPECT_EQ(fused_steps(cx), 0);
    batch.add("shared product", Region{cx}, dims, near_overflow);
  }
  batch.run(test_compiler());
}

// A loop variable divided by its own extent folds away (`$r % E` is `$r`, `$r / E` is 0),
// and divisions that depend only on the row are computed once per row: a causal mask
// built from an iota over the flattened (seq, keys) index, with keys a dynamic dim, left
// divisions by run-time values in every element of the softmax's loops.
TEST(KernelFused, LoopVariablesDividedByTheirExtentFoldAndRowDivisionsAreHoisted) {
  const Expression keys = Expression::var("keys"), z = Expression::index();
  Graph cx;
  auto x = cx.tensor({kSeq, keys});
  auto mask = cx.iota(lt(z % keys, z / keys % kSeq + 2), {kSeq, keys}).cast(DType::F32);
  (x + (mask - 1.0) * 1e9).softmax(1).output();
  auto k = lower(Region{cx});
  ASSERT_TRUE(k);
  const std::string ir = to_string(*k);
  EXPECT_EQ(ir.find("%keys"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("/keys"), std::string::npos) << ir;
  // What is left, `$row % seq`, is computed once per row (an Index statement of the row),
  // not in the loops over the keys.
  auto divides_in_loops = [](const std::vector<Stmt>& stmts, auto&& self) -> bool {
    for (const auto& st : stmts) {
      for (const Expression* x : {&st.index, &st.guard}) {
        const std::string t = x->to_string();
        if (t.find('%') != std::string::npos || t.find('/') != std::string::npos) return true;
      }
      if (self(st.body, self)) return true;
    }
    return false;
  };
  for (const auto& st : k->phases[0].row_body) {
    if (st.kind == StmtKind::Reduce) {
      EXPECT_FALSE(divides_in_loops(st.body, divides_in_loops)) << ir;
    }
  }
  EXPECT_FALSE(divides_in_loops(k->phases[0].col_body, divides_in_loops)) << ir;
  EXPECT_NE(ir.find("%seq"), std::string::npos) << ir;  // in the row's statements
  Batch batch;
  batch.add("causal softmax over dynamic keys", Region{cx},
            {{{"seq", 3}, {"keys", 5}}, {{"seq", 4}, {"keys", 70}}, {{"seq", 2}, {"keys", 1}}}, plain_data);
  batch.run(test_compiler());
}

// CUDA: a load through a padded view computes its index before its guard, so that the loads
// of one element share their divisions by dynamic dims (a compiler does not hoist a
// division out of a condition; RoPE's six guarded loads divided 12 times per element). C++
// keeps the index inside the guard: a division there could trap when the guard is false.
TEST(KernelFused, CudaGuardedLoadsComputeTheirIndexBeforeTheGuard) {
  Graph cx;
  auto x = cx.tensor({4, kSeq});
  auto y = cx.tensor({4, kSeq});
  (x.pad(1, 1, 2) * y.pad(1, 2, 1) + x.pad(1, 3, 0)).output();
  auto k = lower(Region{cx});
  ASSERT_TRUE(k);
  const std::string cuda = emit_cuda(*k, "k"), cpp = emit_cpp(*k, "k");
  int guarded = 0;
  std::istringstream lines(cuda);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" ? ") == std::string::npos || line.find("in") == std::string::npos ||
        (line.find("in0[") == std::string::npos && line.find("in1[") == std::string::npos))
      continue;
    ++guarded;
    // The guard (before " ? ") may divide: it is computed anyway. What it guards may not.
    const std::string guarded_part = line.substr(line.find(" ? "));
    EXPECT_NE(guarded_part.find("_at]"), std::string::npos) << "a guarded load indexes in place: " << line;
    EXPECT_EQ(guarded_part.find("lm_floor"), std::string::npos) << "a division under a guard: " << line;
  }
  // Three loads per body; a vectorized kernel (its output at the element's index) has two
  // bodies, the vector loop's and the scalar loop's.
  EXPECT_EQ(cuda_vector_width(*k), 4);
  EXPECT_EQ(guarded, 2 * 3) << cuda;
  EXPECT_NE(cuda.find("_at = "), std::string::npos) << cuda;
  EXPECT_EQ(cpp.find("_at = "), std::string::npos) << cpp;
  EXPECT_NE(cpp.find(" ? "), std::string::npos) << cpp;
}

// An elementwise kernel runs in blocks of its output's last dim (Kernel::row_block) on the
// CPU: a bias broadcast over the rows is read at the block's index, contiguously, instead
// of at `$row % 32` (a gather). Blocks cut by the thread split (the harness runs the range
// in two halves: 3 x 48 splits inside a block) and views of every kind give the reference's values.
TEST(KernelFused, ElementwiseKernelsRunInBlocksOfTheLastDim) {
  Batch batch;
  {
    Graph cx;
    auto x = cx.tensor({kSeq, 32});
    auto bias = cx.tensor({32});
    ((x + bias.expand({kSeq, 32})) * 0.5).output();
    auto k = lower(Region{cx});
    ASSERT_TRUE(k);
    EXPECT_EQ(k->geometry, Geometry::Elementwise);
    EXPECT_EQ(k->row_block, 32);
    const std::string src = emit_cpp(*k, "k");
    EXPECT_NE(src.find("in1[((long long)(lm_i))]"), std::string::npos) << src;
    batch.add("bias over rows", Region{cx}, kSeqDims);
  }
  for (ViewKind v : kViewKinds) {
    Graph cx;  // (seq, 48) read through each view kind
    auto x = viewed_input(cx, DType::F32, v, kSeq, 48);
    NodeId xin = add_op(cx, OpKind::Mul, DType::F32, {kSeq, 48}, {x, x});
    add_output(cx, xin);
    auto k = lower(Region{cx});
    ASSERT_TRUE(k);
    EXPECT_EQ(k->row_block, 48) << view_name(v);
    batch.add(std::string("view ") + view_name(v), Region{cx}, kSeqDims);
  }
  {
    Graph cx;  // rank 3, the row's middle dim broadcast; a last dim below 16 keeps one loop
    auto x = cx.tensor({kSeq, 3, 16});
    auto y = cx.tensor({kSeq, 1, 16});
    (x * y.expand({kSeq, 3, 16}) + x.sin()).output();
    EXPECT_EQ(lower(Region{cx})->row_block, 16);
    batch.add("rank 3 broadcast", Region{cx}, kSeqDims);
    Graph small;
    (small.tensor({kSeq, 8}) * 2.0).output();
    EXPECT_EQ(lower(Region{small})->row_block, 0);
  }
  batch.run(test_compiler());
}

// fold_loop_extent: with 0 <= i < W, `(W*X + i) / n` is `X / (n/W)` and `(W*X + i) % n` is
// `(X % (n/W))*W + i` when W divides n (RoPE's table read per block). Checked numerically
// over negative and positive X, with a dim in X, against the unfolded expression; a
// coefficient W does not divide (the blocks then cross multiples of n) must stay exact too.
TEST(KernelFused, BlockDivisionsFoldExactly) {
  const Expression i = Expression::var("$i"), o = Expression::var("$o"), d = Expression::var("d");
  struct Case {
    Expression e;
    int64_t w;
    bool folds;
  };
  const std::vector<Case> cases = {
      {(i + o * 32) / 512, 32, true},       {(i + o * 32) % 512, 32, true},
      {(i + o * 64 + d * 128) / 128, 64, true}, {(o * 96 + i - 96) % 192, 96, true},
      {(i + o * 32) / 512, 64, false},      {(i + o * 16) % 64, 32, false},
      {(i * 2 + o * 32) / 64, 32, false},
  };
  auto divides_i = [](const Expression& e, auto&& self) -> bool {
    if ((e.kind() == ExprKind::Div || e.kind() == ExprKind::Mod) && e.children()[0].depends_on("$i")) return true;
    for (const auto& kid : e.children())
      if (self(kid, self)) return true;
    return false;
  };
  for (const auto& c : cases) {
    const Expression f = fold_loop_extent(c.e, "$i", c.w);
    EXPECT_EQ(divides_i(f, divides_i), !c.folds) << c.e.to_string() << " -> " << f.to_string();
    for (int64_t ov = -50; ov <= 50; ++ov)
      for (int64_t dv : {0, 3})
        for (int64_t iv = 0; iv < c.w; ++iv) {
          const DimMap at = {{"$i", iv}, {"$o", ov}, {"d", dv}};
          ASSERT_EQ(f.eval(at), c.e.eval(at)) << c.e.to_string() << " -> " << f.to_string() << " at i=" << iv << " o=" << ov;
        }
  }
  // A divisor that is a constant times dims (a [heads, seq, 16] view's flat index divides by
  // seq * 16) folds when W divides the constant; a fold an operand's fold exposes (RoPE's
  // halves: `((v/32)*16 + v%32) / n`) is taken too. Positive dims only: sizes.
  const Expression v = i + o * 8;
  const std::vector<Case> symbolic = {
      {v / (d * 16), 8, true},
      {v % (d * 16), 8, true},
      {(v / 32 * 16 + v % 32) / (d * 16), 8, true},
      {(v / 32 * 16 + v % 32 + 16) % (d * 32), 8, true},
      {v / (d * 12), 8, false},
      {v % (d * 4), 8, false},
  };
  for (const auto& c : symbolic) {
    const Expression f = fold_loop_extent(c.e, "$i", c.w);
    EXPECT_EQ(divides_i(f, divides_i), !c.folds) << c.e.to_string() << " -> " << f.to_string();
    for (int64_t ov = -40; ov <= 40; ++ov)
      for (int64_t dv : {1, 2, 3, 7})
        for (int64_t iv = 0; iv < c.w; ++iv) {
          const DimMap at = {{"$i", iv}, {"$o", ov}, {"d", dv}};
          ASSERT_EQ(f.eval(at), c.e.eval(at)) << c.e.to_string() << " -> " << f.to_string() << " at i=" << iv << " o=" << ov
                                              << " d=" << dv;
        }
  }
}

// An extracted program holds one node per value (the e-graph merges identical ones), so
// the Iota of several `where`s in different kernels is one node. fuse_program copies it
// (and shared Constants) into each reader: loaded from a buffer, the where's gather index
// is opaque and the kernel gathers element by element instead of selecting (GPT-2's
// tanh GELU: 41 us -> 1.7 us per call).
TEST(KernelFused, SharedIotasAndConstantsAreCopiedIntoEachReader) {
  Graph cx;
  auto x = cx.tensor({6, 37});
  auto y = cx.tensor({6, 37});
  GraphTensor::where(x.lt(0.0), x * 3.0, y).output();
  GraphTensor::where(y.lt(x), y, x + 3.0).exp2().output();
  cx.iota(Expression::index(), {6, 37}, DType::I32).output();  // a reader that is no kernel
  // Merge identical leaves, as extraction does (each maps to the first of its kind).
  std::vector<NodeId> first(cx.size());
  for (NodeId i = 0; i < cx.size(); ++i) {
    first[i] = i;
    const Node& a = cx.node(i);
    if (a.op != OpKind::Iota && a.op != OpKind::Constant) continue;
    for (NodeId j = 0; j < i; ++j) {
      const Node& b = cx.node(j);
      if (first[j] == j && b.op == a.op && b.dtype == a.dtype && b.shape == a.shape &&
          b.iota_expr == a.iota_expr && (a.op != OpKind::Constant || b.constant == a.constant)) {
        first[i] = j;
        break;
      }
    }
  }
  for (NodeId i = 0; i < cx.size(); ++i)
    for (auto& in : cx.mutable_node(i).inputs) in.node = first[in.node];
  int readers_of_first_iota = 0;
  for (NodeId i = 0; i < cx.size(); ++i)
    for (const auto& in : cx.node(i).inputs)
      readers_of_first_iota += cx.node(in.node).op == OpKind::Iota && in.node == first[in.node] &&
                               in.node == *std::find_if(first.begin(), first.end(), [&](NodeId f) { return cx.node(f).op == OpKind::Iota; });
  ASSERT_GE(readers_of_first_iota, 3);  // both wheres and the Output

  std::vector<NodeId> old_to_new;
  const Graph fused = fuse_program(cx, old_to_new);
  int kernels = 0, iotas = 0, constants = 0;  // leaves some node reads (merging left the copies unread)
  std::vector<bool> read(fused.size(), false);
  for (const Node& n : fused.nodes())
    for (const auto& in : n.inputs) read[in.node] = true;
  for (NodeId i = 0; i < fused.size(); ++i) {
    const Node& n = fused.node(i);
    iotas += n.op == OpKind::Iota && read[i];
    constants += n.op == OpKind::Constant && read[i];
    if (n.op != OpKind::BackendOp) continue;
    ++kernels;
    auto k = lower(*fused_region(n));
    ASSERT_TRUE(k);
    const std::string text = to_string(*k);
    EXPECT_EQ(text.find(" bound "), std::string::npos) << "the where's gather should lower to a select:\n" << text;
    EXPECT_NE(text.find("select"), std::string::npos) << text;
  }
  EXPECT_EQ(kernels, 2);
  EXPECT_EQ(iotas, 1);      // kept for the Output that reads it
  EXPECT_EQ(constants, 0);  // every reader of a constant is fused
}

TEST(KernelFused, RefusesReductionsThatWouldBeRecomputed) {
  {
    // Softmax over a leading axis: the reduced values vary along the column.
    Graph cx;
    cx.tensor({7, kSeq}).softmax(0).output();
    EXPECT_FALSE(lower(Region{cx}));
  }
  {
    Graph cx;
    auto x = cx.tensor({5, 6});
    (x - x.mean({0}).expand({5, 6})).output();
    EXPECT_FALSE(lower(Region{cx}));
  }
  {
    // A Scatter inside a region (not its result) is not one kernel.
    Graph g;
    NodeInput dest{add_input(g, DType::F32, {6}), ShapeTracker::contiguous({6})};
    NodeInput idx{add_input(g, DType::I32, {2}), ShapeTracker::contiguous({2})};
    NodeInput src{add_input(g, DType::F32, {2}), ShapeTracker::contiguous({2})};
    NodeId s = add_op(g, OpKind::Scatter, DType::F32, {6}, {dest, idx, src});
    add_output(g, add_op(g, OpKind::Sin, DType::F32, {6}, {{s, ShapeTracker::contiguous({6})}}));
    EXPECT_FALSE(lower(Region{g}));
  }
  {
    Graph cx;  // an elementwise region always lowers, one thread per element
    auto x = cx.tensor({5, 6});
    (x * 2.0).exp2().output();
    auto k = lower(Region{cx});
    ASSERT_TRUE(k);
    EXPECT_EQ(k->geometry, Geometry::Elementwise);
  }
}

// A gather with at least twice the elements of its data (a convolution's im2col) reads
// each data element several times: a computed data operand stays a kernel of its own
// (computed once) rather than being recomputed inside the gather's loop per read. A
// where's gather (half its concatenated data) still fuses.
TEST(KernelFused, GathersThatReplicateAComputedOperandLeaveItMaterialised) {
  auto node = [](OpKind op, DType dt, Shape shape) {
    Node n;
    n.op = op;
    n.dtype = dt;
    n.shape = std::move(shape);
    return n;
  };
  auto exp = singleton(node(OpKind::Exp2, DType::F32, {12}),
                       std::vector{FuseOperand{nullptr, DType::F32, {12}, ShapeTracker::contiguous({12})}});
  ASSERT_TRUE(exp);
  for (int64_t reads : {11, 12, 23, 24, 36}) {
    auto gathered = fuse(node(OpKind::Gather, DType::F32, {reads}),
                         std::vector{FuseOperand{nullptr, DType::I32, {reads}, ShapeTracker::contiguous({reads})},
                                     FuseOperand{&*exp, DType::F32, {12}, ShapeTracker::contiguous({12})}});
    EXPECT_EQ(gathered.has_value(), reads < 24) << reads << " reads of 12 elements";
  }
  // Data that is only read (an input) fuses at any size.
  auto read_only = singleton(node(OpKind::Gather, DType::F32, {36}),
                             std::vector{FuseOperand{nullptr, DType::I32, {36}, ShapeTracker::contiguous({36})},
                                         FuseOperand{nullptr, DType::F32, {12}, ShapeTracker::contiguous({12})}});
  ASSERT_TRUE(read_only);
  auto scaled = fuse(node(OpKind::Sin, DType::F32, {36}),
                     std::vector{FuseOperand{&*read_only, DType::F32, {36}, ShapeTracker::contiguous({36})}});
  EXPECT_TRUE(scaled);

  // fuse_program keeps the same boundary in an extracted program.
  for (int64_t reads : {12, 36}) {
    Graph g;
    NodeId x = add_input(g, DType::F32, {12});
    NodeId idx = add_input(g, DType::I32, {reads});
    NodeId e = add_op(g, OpKind::Exp2, DType::F32, {12}, {{x, ShapeTracker::contiguous({12})}});
    NodeId gathered = add_op(g, OpKind::Gather, DType::F32, {reads},
                             {{idx, ShapeTracker::contiguous({reads})}, {e, ShapeTracker::contiguous({12})}});
    add_output(g, add_op(g, OpKind::Sin, DType::F32, {reads}, {{gathered, ShapeTracker::contiguous({reads})}}));
    std::vector<NodeId> old_to_new;
    const Graph fused = fuse_program(g, old_to_new);
    EXPECT_EQ(old_to_new[e] != kNoNode, reads == 36) << reads << " reads: the exp2 " << (reads == 36 ? "is" : "is not")
                                                    << " computed on its own";
  }
}

// A KV-cache append (two caches sharing one index, the k rows computed as RoPE computes
// them): by default the scatters run alone and their index and row producers as kernels
// of their own. With FuseOptions (the CUDA runtime's), each scatter's kernel computes its
// rows, and the index region (index arithmetic, no inputs, read by both) is copied into
// both: two kernels in all, each lowering to a scatter.
TEST(KernelFused, ScattersComputeTheirRowsAndIndexesWhenAsked) {
  const Expression p = Expression::var("p"), s = Expression::var("s");
  Graph cx;
  auto k_cache = cx.named_tensor("k_cache", {16, 2, 4}).persist();
  auto v_cache = cx.named_tensor("v_cache", {16, 2, 4}).persist();
  auto k = cx.named_tensor("k", {s, 2, 4}), v = cx.named_tensor("v", {s, 2, 4});
  auto index = cx.iota(p + Expression::index() / 8, {s, 2, 4}, DType::I32) + cx.iota(Expression(0), {s, 2, 4}, DType::I32);
  auto k_next = k_cache.scatter(0, index, k * 1.5 - 0.25), v_next = v_cache.scatter(0, index, v);
  cx.update(k_cache, k_next);
  cx.update(v_cache, v_next);
  // What the e-graph hands over: the index as one Fused region with no inputs.
  std::vector<NodeId> first_map;
  const Graph extracted = fuse_program(cx, first_map);
  auto count = [](const Graph& g, auto&& pred) { return std::count_if(g.nodes().begin(), g.nodes().end(), pred); };
  auto scatter_kernel = [](const Node& n) {
    if (n.op != OpKind::BackendOp) return false;
    const Graph& sg = fused_region(n)->graph;
    return std::any_of(sg.nodes().begin(), sg.nodes().end(), [](const Node& m) { return m.op == OpKind::Scatter; });
  };
  ASSERT_EQ(count(extracted, [](const Node& n) { return n.op == OpKind::Scatter; }), 2);
  ASSERT_EQ(count(extracted, [](const Node& n) { return n.op == OpKind::BackendOp && n.inputs.empty(); }), 1)
      << "the index should be one input-free region";

  std::vector<NodeId> map;
  FuseOptions options;
  options.scatter_roots = true;
  options.recompute_index_regions = true;
  const Graph fused = fuse_program(extracted, map, options);
  EXPECT_EQ(count(fused, [](const Node& n) { return n.op == OpKind::Scatter; }), 0);
  EXPECT_EQ(count(fused, [](const Node& n) { return n.op == OpKind::BackendOp; }), 2);
  EXPECT_EQ(count(fused, scatter_kernel), 2);
  for (const Node& n : fused.nodes()) {
    if (n.op != OpKind::BackendOp) continue;
    auto lowered = lower(*fused_region(n));
    ASSERT_TRUE(lowered) << "a scatter region does not lower";
    EXPECT_EQ(lowered->phases.size(), 2u) << "copy, then write";
    EXPECT_GE(lowered->phases.front().copies_input, 0) << "the copy phase must read the cache whole (in place)";
  }
  // A reduction feeding the rows (Qwen 3's k norm) stays a kernel of its own.
  Graph normed;
  auto cache = normed.named_tensor("cache", {16, 4}).persist();
  auto rows = normed.named_tensor("rows", {s, 4});
  auto at = normed.iota(p + Expression::index() / 4, {s, 4}, DType::I32);
  normed.update(cache, cache.scatter(0, at, rows.rms_norm(1, std::nullopt, 1e-5)));
  std::vector<NodeId> normed_map;
  const Graph kept = fuse_program(normed, normed_map, options);
  EXPECT_EQ(count(kept, scatter_kernel), 1);
  for (const Node& n : kept.nodes())
    if (n.op == OpKind::BackendOp) {
      EXPECT_TRUE(lower(*fused_region(n))) << "every kernel lowers";
    }
}

// The index region as the 8B model's extraction hands it over: a Fused region reading
// Iota nodes the program shares (one set of write positions for every layer's K and V
// scatter). It is still index arithmetic: with FuseOptions it and the Iotas it reads are
// copied into each scatter's kernel, and neither runs as a kernel of its own (they did, a
// kernel a layer, until session 22).
TEST(KernelFused, IndexRegionsReadingSharedIotasAreCopiedIntoTheirReaders) {
  const Expression p = Expression::var("p"), s = Expression::var("s");
  const Shape rows{s, 2, 4}, cache{16, 2, 4};
  Graph g;
  const NodeId k_cache = add_input(g, DType::F32, cache), v_cache = add_input(g, DType::F32, cache);
  const NodeId k = add_input(g, DType::F32, rows), v = add_input(g, DType::F32, rows);
  auto iota = [&](const Expression& value) {
    Node n;
    n.op = OpKind::Iota;
    n.dtype = DType::I32;
    n.shape = rows;
    n.iota_expr = value;
    return g.add_node(std::move(n));
  };
  const NodeId position = iota(p + Expression::index() / 8), zero = iota(Expression(0));
  Region index_region;
  {
    Graph& r = index_region.graph;
    const NodeId a = add_input(r, DType::I32, rows), b = add_input(r, DType::I32, rows);
    add_output(r, add_op(r, OpKind::Add, DType::I32, rows,
                         {{a, ShapeTracker::contiguous(rows)}, {b, ShapeTracker::contiguous(rows)}}));
  }
  Node fused;
  fused.op = OpKind::BackendOp;
  fused.dtype = DType::I32;
  fused.shape = rows;
  auto call = std::make_shared<BackendOpCall>();
  call->name = "Fused";
  call->attrs = {serialize(index_region)};
  fused.backend = std::move(call);
  fused.inputs = {{position, ShapeTracker::contiguous(rows)}, {zero, ShapeTracker::contiguous(rows)}};
  const NodeId index = g.add_node(std::move(fused));
  for (auto [dest, src] : {std::pair{k_cache, k}, {v_cache, v}})
    add_output(g, add_op(g, OpKind::Scatter, DType::F32, cache,
                         {{dest, ShapeTracker::contiguous(cache)}, {index, ShapeTracker::contiguous(rows)},
                          {src, ShapeTracker::contiguous(rows)}},
                         0));
  FuseOptions options;
  options.scatter_roots = true;
  options.recompute_index_regions = true;
  std::vector<NodeId> map;
  const Graph out = fuse_program(g, map, options);
  int kernels = 0;
  for (const Node& n : out.nodes()) {
    EXPECT_NE(n.op, OpKind::Iota) << "a shared Iota still runs on its own";
    EXPECT_NE(n.op, OpKind::Scatter) << "a scatter runs without its index";
    if (n.op != OpKind::BackendOp) continue;
    ++kernels;
    auto lowered = lower(*fused_region(n));
    ASSERT_TRUE(lowered) << "a scatter region does not lower";
    const Graph& sg = fused_region(n)->graph;
    EXPECT_TRUE(std::any_of(sg.nodes().begin(), sg.nodes().end(), [](const Node& m) { return m.op == OpKind::Scatter; }));
  }
  EXPECT_EQ(kernels, 2) << "one kernel per scatter, none for the index";
  // Without the option the index region and its Iotas keep their kernels.
  std::vector<NodeId> plain_map;
  FuseOptions scatter_only;
  scatter_only.scatter_roots = true;
  const Graph plain = fuse_program(g, plain_map, scatter_only);
  EXPECT_NE(plain_map[index], kNoNode);
}

TEST(KernelFused, FuseBuildsRegionsStepByStep) {
  auto node = [](OpKind op, Shape shape, int axis = -1) {
    Node n;
    n.op = op;
    n.dtype = DType::F32;
    n.shape = std::move(shape);
    n.axis = axis;
    return n;
  };
  Shape s = {4, kSeq};
  FuseOperand a{nullptr, DType::F32, s, ShapeTracker::contiguous(s)};
  FuseOperand b{nullptr, DType::F32, {kSeq}, ShapeTracker::contiguous({kSeq}).insert_broadcast(0, 4)};
  auto mul = singleton(node(OpKind::Mul, s), std::vector{a, b});
  ASSERT_TRUE(mul);
  auto exp = fuse(node(OpKind::Exp2, s), std::vector{FuseOperand{&*mul, DType::F32, s, ShapeTracker::contiguous(s)}});
  ASSERT_TRUE(exp);
  EXPECT_EQ(exp->graph.inputs().size(), 2u);
  auto sum = fuse(node(OpKind::SumReduce, {4}, 1), std::vector{FuseOperand{&*exp, DType::F32, s, ShapeTracker::contiguous(s)}});
  ASSERT_TRUE(sum);
  // exp(x) / sum(exp(x)): the two operand regions' inputs are concatenated (4 inputs).
  auto recip = fuse(node(OpKind::Recip, {4}), std::vector{FuseOperand{&*sum, DType::F32, {4}, ShapeTracker::contiguous({4})}});
  ASSERT_TRUE(recip);
  auto out = fuse(node(OpKind::Mul, s), std::vector{FuseOperand{&*exp, DType::F32, s, ShapeTracker::contiguous(s)},
                                                    FuseOperand{&*recip, DType::F32, {4}, ShapeTracker::contiguous({4}).insert_broadcast(1, kSeq)}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->graph.inputs().size(), 4u);
  // A permuted read of `out` is refused: its row sums would vary along the new columns.
  Shape st = {kSeq, 4};
  int axes[] = {1, 0};
  EXPECT_FALSE(fuse(node(OpKind::Sin, st), std::vector{FuseOperand{&*out, DType::F32, s, ShapeTracker::contiguous(s).permute(axes)}}));
  // A region whose Output reads a permuted view: fusing materialises it with an identity Cast.
  Region perm;
  {
    NodeId x = add_input(perm.graph, DType::F32, s);
    NodeId e = add_op(perm.graph, OpKind::Exp2, DType::F32, s, {{x, ShapeTracker::contiguous(s)}});
    add_op(perm.graph, OpKind::Output, DType::F32, st, {{e, ShapeTracker::contiguous(s).permute(axes)}});
  }
  auto sin = fuse(node(OpKind::Sin, st), std::vector{FuseOperand{&perm, DType::F32, st, ShapeTracker::contiguous(st)}});
  ASSERT_TRUE(sin);
  EXPECT_NE(serialize(*sin).find("(Cast F32"), std::string::npos);
  // singleton ignores the operand's region: all inputs fresh.
  auto single = singleton(node(OpKind::Sin, st), std::vector{FuseOperand{&*out, DType::F32, s, ShapeTracker::contiguous(s).permute(axes)}});
  ASSERT_TRUE(single);
  EXPECT_EQ(single->graph.inputs().size(), 1u);
  // Unfusable: a reduction over the rows read back along them.
  auto colsum = fuse(node(OpKind::SumReduce, {kSeq}, 0), std::vector{FuseOperand{&*mul, DType::F32, s, ShapeTracker::contiguous(s)}});
  ASSERT_TRUE(colsum);
  EXPECT_FALSE(fuse(node(OpKind::Add, s), std::vector{FuseOperand{&*mul, DType::F32, s, ShapeTracker::contiguous(s)},
                                                      FuseOperand{&*colsum, DType::F32, {kSeq}, ShapeTracker::contiguous({kSeq}).insert_broadcast(0, 4)}}));
  // Leaves: a Constant and an Iota take no operands.
  Node c = node(OpKind::Constant, {});
  c.constant = 0.75;
  auto constant = singleton(c, {});
  ASSERT_TRUE(constant);
  Node iota = node(OpKind::Iota, s);
  iota.dtype = DType::I32;
  iota.iota_expr = Expression::index() % 3;
  auto iota_region = singleton(iota, {});
  ASSERT_TRUE(iota_region);
  auto cast = fuse(node(OpKind::Cast, s), std::vector{FuseOperand{&*iota_region, DType::I32, s, ShapeTracker::contiguous(s)}});
  ASSERT_TRUE(cast);
  auto scaled = fuse(node(OpKind::Mul, s), std::vector{FuseOperand{&*cast, DType::F32, s, ShapeTracker::contiguous(s)},
                                                       FuseOperand{&*constant, DType::F32, {}, ShapeTracker::contiguous({}).insert_broadcast(0, 4).insert_broadcast(1, kSeq)}});
  ASSERT_TRUE(scaled);
  EXPECT_EQ(scaled->graph.inputs().size(), 0u);
  Batch batch;
  batch.add("iota * constant", *scaled, kSeqDims);
  batch.add("fused softmax-like", *out, kSeqDims, plain_data);
  batch.add("fused through a permuted region", *sin, kSeqDims, plain_data);
  batch.add("singleton", *single, kSeqDims);
  batch.run(test_compiler());
}

TEST(KernelFused, SerializeRoundTripAndDeterminism) {
  std::vector<Region> regions;
  {
    Graph cx;
    auto x = cx.tensor({kSeq, 10}, DType::BF16);
    x.layer_norm(1, cx.tensor({10}, DType::BF16), std::nullopt).output();
    regions.push_back(Region{cx});
  }
  {
    Graph cx;
    auto table = cx.tensor({9, 4});
    auto ids = cx.tensor({kSeq, 4}, DType::I64);
    (table.gather(0, ids).pad(0, 1, 2) * -0.0).flip({0}).output();
    regions.push_back(Region{cx});
  }
  {
    Graph cx;
    Node n;
    n.op = OpKind::Iota;
    n.dtype = DType::I8;
    n.shape = {kSeq, 3};
    n.iota_expr = min(Expression::index() * 5 % 7, kSeq) - 1;
    NodeId id = cx.add_node(n);
    add_output(cx, id);
    regions.push_back(Region{cx});
  }
  for (const Region& r : regions) {
    std::string text = serialize(r);
    EXPECT_EQ(text.find('\n'), std::string::npos);
    Region back = parse_region(text);
    EXPECT_EQ(serialize(back), text);
    auto k1 = lower(r), k2 = lower(back);
    ASSERT_TRUE(k1 && k2);
    EXPECT_EQ(to_string(*k1), to_string(*k2));
    EXPECT_EQ(emit_cpp(*k1, "k"), emit_cpp(*k2, "k"));
    EXPECT_EQ(emit_cuda(*k1, "k"), emit_cuda(*k2, "k"));
    EXPECT_EQ(emit_cuda(*k1, "k"), emit_cuda(*lower(r), "k"));
  }
  EXPECT_THROW(parse_region("(region (Add F32"), Error);
  EXPECT_THROW(parse_region("(region (Frobnicate F32 (shape 3) -1 0 0))"), Error);
  EXPECT_THROW(parse_region("(region (Input F32 (shape 3) -1 0 0) (Exp2 F32 (shape 3) -1 0 0 (in 5 (view 0 1 (d 3 \"z\" 1)))))"), Error);
  EXPECT_THROW(parse_region("(region (Input F32 (shape 3) -1 0 0))"), Error);  // no Output
  EXPECT_THROW(parse_region("(region) trailing"), Error);
  EXPECT_THROW(emit_cpp(*lower(regions[0]), "not an identifier"), Error);
}

}  // namespace
}  // namespace luminal::kernel::testing
