// Long single-precision sums on the CPU backend: the emitted SIMD loop adds groups of four
// elements in float and the groups in double (src/kernel/emit.cpp, blocked_sum). Checked
// against a double sum computed here: within 2^-22 of sum(|x|) plus half an ulp of the
// result, overflowing groups redone in double, infinities, NaN and signed zeros as the
// sequential sum gives them; row lengths around the group threshold and the group size,
// contiguous and strided reads. And softmax over long rows against double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "luminal/cpu/cpu_runtime.hpp"
#include "luminal/luminal.hpp"

using namespace luminal;

namespace {

constexpr int64_t kRows = 8;

// Row r of a (kRows, n) tensor, each row a different hazard for a reordered float sum.
std::vector<float> make_rows(int64_t n, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(kRows * n));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int64_t q = n / 4;  // the emitted loop groups elements i, i + q, i + 2q, i + 3q
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float v = normal(rng);
      switch (r) {
        case 1: v = std::ldexp(unit(rng), static_cast<int>(c % 41) - 20); break;  // positive, 2^-20 to 2^20
        case 2:  // one group of +-3e38 that cancels: its float sum overflows, the double sum does not
          if (c == 1 || c == 1 + q) v = 3.0e38f;
          if (c == 1 + 2 * q || c == 1 + 3 * q) v = -3.0e38f;
          break;
        case 3: v = c == n - 1 ? std::numeric_limits<float>::infinity() : v; break;  // in the remainder for odd n
        case 4: v = c == n / 2 ? std::numeric_limits<float>::quiet_NaN() : v; break;
        case 5: v = -0.0f; break;                                              // the sum is +0, as in order
        case 6: v = (c % 2 ? -1.0f : 1.0f) * std::numeric_limits<float>::denorm_min() * static_cast<float>(c % 7); break;
        case 7: v = c == 0 ? 0x1p20f : 0.01f * static_cast<float>(1 + c % 3); break;  // a float running sum drops these
        default: break;
      }
      x[static_cast<size_t>(r * n + c)] = v;
    }
  return x;
}

// "" when `got` is the float sum of row r within the bound, else why not.
std::string check_sum(const std::vector<float>& x, int64_t n, int64_t r, float got) {
  double exact = 0, magnitude = 0;
  for (int64_t c = 0; c < n; ++c) {
    exact += static_cast<double>(x[static_cast<size_t>(r * n + c)]);
    magnitude += std::fabs(static_cast<double>(x[static_cast<size_t>(r * n + c)]));
  }
  const auto want = static_cast<float>(exact);
  std::ostringstream os;
  os.precision(9);
  if (std::isnan(want) != std::isnan(got) || (std::isinf(want) && got != want) ||
      (want == 0 && got == 0 && std::signbit(want) != std::signbit(got)))
    os << "row " << r << ": got " << got << ", want " << want;
  else if (std::isfinite(want) &&
           !(std::fabs(static_cast<double>(got) - exact) <= std::ldexp(magnitude, -22) + std::fabs(exact) * 0x1p-24))
    os << "row " << r << ": got " << got << ", want " << exact << " (|x| sums to " << magnitude << ")";
  return os.str();
}

}  // namespace

TEST(CpuSums, LongSumsAddGroupsOfFourInFloatWithinTheirBound) {
  std::mt19937 rng(9);
  for (int64_t n : {63, 64, 65, 67, 130, 1001, 4099}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const std::vector<float> rows = make_rows(n, rng);
    std::vector<float> columns(rows.size());  // the transpose: the sum reads with stride kRows
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < n; ++c) columns[static_cast<size_t>(c * kRows + r)] = rows[static_cast<size_t>(r * n + c)];
    Graph cx;
    GraphTensor a = cx.tensor({kRows, n}), b = cx.tensor({n, kRows});
    GraphTensor sa = a.sum({1}).output(), sb = b.permute({1, 0}).sum({1}).output();
    auto rt = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1));
    rt.set_data(a, rows);
    rt.set_data(b, columns);
    rt.execute(cx.dim_map());
    const std::vector<float> got_a = rt.get_f32(sa), got_b = rt.get_f32(sb);
    for (int64_t r = 0; r < kRows; ++r) {
      EXPECT_EQ(check_sum(rows, n, r, got_a[static_cast<size_t>(r)]), "") << "contiguous";
      EXPECT_EQ(check_sum(rows, n, r, got_b[static_cast<size_t>(r)]), "") << "strided";
    }
  }
}

TEST(CpuSums, SoftmaxOfLongRowsAgainstDoublePrecision) {
  constexpr int64_t n = 4099;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> x(static_cast<size_t>(5 * n));
  for (auto& v : x) v = normal(rng);
  const float inf = std::numeric_limits<float>::infinity();
  x[static_cast<size_t>(n + 17)] = std::numeric_limits<float>::quiet_NaN();  // row 1: NaN everywhere
  for (int64_t c = 0; c < n; ++c) x[static_cast<size_t>(2 * n + c)] = c % 3 ? -inf : 80.0f + static_cast<float>(c % 5);
  x[static_cast<size_t>(3 * n + 5)] = inf;  // row 3: the maximum is inf, inf - inf is NaN, so is the sum
  for (int64_t c = 0; c < n; ++c) x[static_cast<size_t>(4 * n + c)] = c == 9 ? 1e30f : -1e30f;  // row 4: one 1, zeros
  Graph cx;
  GraphTensor in = cx.tensor({5, n});
  GraphTensor out = in.softmax(1).output();
  auto rt = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1));
  rt.set_data(in, x);
  rt.execute(cx.dim_map());
  const std::vector<float> got = rt.get_f32(out);
  for (int64_t r = 0; r < 5; ++r) {
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    bool nan = false;
    for (int64_t c = 0; c < n; ++c) {
      const double v = x[static_cast<size_t>(r * n + c)];
      nan |= std::isnan(v);
      m = std::max(m, v);
    }
    for (int64_t c = 0; c < n; ++c) s += std::exp(static_cast<double>(x[static_cast<size_t>(r * n + c)]) - m);
    for (int64_t c = 0; c < n; ++c) {
      const size_t k = static_cast<size_t>(r * n + c);
      const double want = nan || std::isinf(m) ? std::nan("") : std::exp(static_cast<double>(x[k]) - m) / s;
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got[k])) << "row " << r << " column " << c << ": " << got[k];
        continue;
      }
      // x - max and its product with log2(e) are rounded in float: relative error ~2^-24 |x - max|.
      const double bound = want == 0 ? 1e-44 : want * (4e-7 + 2e-7 * std::fabs(static_cast<double>(x[k]) - m));
      ASSERT_LE(std::fabs(got[k] - want), bound) << "row " << r << " column " << c << ": " << got[k] << ", want " << want;
    }
  }
}
