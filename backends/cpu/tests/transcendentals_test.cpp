// The CPU backend's F32 exp2 and log2 (float polynomials in the emitted kernels, not the
// reference's double rounded once) against double-precision std::exp2/std::log2 over
// float bit patterns: a strided sweep of all 2^32 and every pattern in windows around
// the edges (0, subnormals, the normal boundary, 1, underflow, overflow, infinities).
// And erf (the F32 decomposition in src/core/tensor_math.cpp) against std::erf, on the
// CPU backend and the reference interpreter.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "luminal/cpu/cpu_runtime.hpp"
#include "luminal/luminal.hpp"

using namespace luminal;

namespace {

constexpr size_t kBatch = size_t{1} << 21;

// Float bits as integers that order like the values (-0 and +0 next to each other).
int64_t ordered(float f) {
  const auto u = std::bit_cast<uint32_t>(f);
  return (u & 0x80000000u) ? -static_cast<int64_t>(u & 0x7fffffffu) - 1 : static_cast<int64_t>(u);
}

// Distance in ulps between `got` and the correctly rounded `want`; NaN, infinities and
// zeros must match exactly (a zero's sign too), reported as a huge distance.
int64_t ulps(float got, float want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : INT64_MAX;
  if (std::isinf(want) || want == 0)
    return got == want && std::signbit(got) == std::signbit(want) ? 0 : INT64_MAX;
  if (!std::isfinite(got)) return INT64_MAX;
  return std::abs(ordered(got) - ordered(want));
}

struct Sweep {
  Graph cx;
  GraphTensor x, e, l;
  cpu::CpuRuntime rt;
  Sweep() : x(cx.tensor({static_cast<int64_t>(kBatch)})), e(x.exp2().output()), l(x.log2().output()),
            rt(cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1))) {}

  int64_t worst_exp2 = 0, worst_log2 = 0;
  float worst_exp2_at = 0, worst_log2_at = 0;
  size_t checked = 0;
  std::string failures;

  // Bit patterns first, first + step, ... (n of them, wrapping at 2^32).
  void run(uint64_t first, uint64_t step, uint64_t n) {
    for (uint64_t done = 0; done < n; done += kBatch) {
      const size_t count = static_cast<size_t>(std::min<uint64_t>(kBatch, n - done));
      HostTensor in = HostTensor::zeros(DType::F32, kBatch);
      auto* v = reinterpret_cast<uint32_t*>(in.bytes.data());
      for (size_t k = 0; k < kBatch; ++k)
        v[k] = static_cast<uint32_t>(first + (done + std::min(k, count - 1)) * step);
      rt.set_data(x, in);
      rt.execute(cx.dim_map());
      const std::vector<float> got_e = rt.get_f32(e), got_l = rt.get_f32(l);
      for (size_t k = 0; k < count; ++k) {
        const float xv = std::bit_cast<float>(v[k]);
        const auto want_e = static_cast<float>(std::exp2(static_cast<double>(xv)));
        const auto want_l = static_cast<float>(std::log2(static_cast<double>(xv)));
        const int64_t de = ulps(got_e[k], want_e), dl = ulps(got_l[k], want_l);
        if (de > worst_exp2) worst_exp2 = de, worst_exp2_at = xv;
        if (dl > worst_log2) worst_log2 = dl, worst_log2_at = xv;
        if ((de > 2 || dl > 2) && failures.size() < 2000) {
          std::ostringstream os;
          os.precision(9);
          os << "x = " << xv << " (0x" << std::hex << v[k] << std::dec << "): exp2 " << got_e[k] << " want " << want_e
             << ", log2 " << got_l[k] << " want " << want_l << "\n";
          failures += os.str();
        }
      }
      checked += count;
    }
  }
};

}  // namespace

TEST(CpuTranscendentals, Exp2AndLog2WithinTwoUlpOfEveryFloatSwept) {
  Sweep s;
  // All 2^32 patterns with a stride that is odd (so every low-bit residue is visited).
  s.run(0, 1021, (uint64_t{1} << 32) / 1021 + 1);
  // Every pattern within 2^17 of each edge, both signs.
  const float edges[] = {0.0f, 1.4e-45f, 1.17549435e-38f, 0.5f, 1.0f, 2.0f, 1.41421356f, 126.0f, 127.0f,
                         128.0f, 149.0f, 150.0f, 151.0f, 1e10f, 3.4028235e38f};
  for (float edge : edges)
    for (float signed_edge : {edge, -edge}) {
      const uint64_t bits = std::bit_cast<uint32_t>(signed_edge);
      s.run(bits >= (1u << 17) ? bits - (1u << 17) : 0, 1, uint64_t{1} << 18);
    }
  // The specials one by one: infinities and NaNs of both signs and payloads.
  s.run(0x7f800000u, 1, 4);
  s.run(0xff800000u, 1, 4);
  s.run(0x7fffffffu, 1, 1);
  EXPECT_TRUE(s.failures.empty()) << s.failures;
  EXPECT_LE(s.worst_exp2, 2) << "at " << s.worst_exp2_at;
  EXPECT_LE(s.worst_log2, 2) << "at " << s.worst_log2_at;
  std::printf("[transcendentals] %zu floats: exp2 within %lld ulp (worst at %a), log2 within %lld ulp (worst at %a)\n",
              s.checked, static_cast<long long>(s.worst_exp2), static_cast<double>(s.worst_exp2_at),
              static_cast<long long>(s.worst_log2), static_cast<double>(s.worst_log2_at));
}

TEST(CpuTranscendentals, SpecialValuesExactly) {
  Graph cx;
  const std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, 1e-45f, -1e-45f,
                                 128.0f, 127.99999f, -149.0f, -150.0f, -149.5f, -1000.0f, 1000.0f, 0.5f};
  GraphTensor x = cx.tensor({static_cast<int64_t>(xs.size())});
  GraphTensor e = x.exp2().output(), l = x.log2().output();
  auto rt = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1));
  rt.set_data(x, xs);
  rt.execute(cx.dim_map());
  const std::vector<float> ge = rt.get_f32(e), gl = rt.get_f32(l);
  for (size_t k = 0; k < xs.size(); ++k) {
    const auto want_e = static_cast<float>(std::exp2(static_cast<double>(xs[k])));
    const auto want_l = static_cast<float>(std::log2(static_cast<double>(xs[k])));
    EXPECT_LE(ulps(ge[k], want_e), 1) << "exp2(" << xs[k] << ") = " << ge[k] << ", want " << want_e;
    EXPECT_LE(ulps(gl[k], want_l), 1) << "log2(" << xs[k] << ") = " << gl[k] << ", want " << want_l;
  }
}

// erf in F32, on the CPU backend and the reference interpreter: within 2e-7 of std::erf
// (relative 1e-6 below |x| = 1e-3, where erf is tiny), exact at the specials and -0.
TEST(CpuTranscendentals, ErfF32AgainstStdErf) {
  std::vector<float> xs;
  for (int k = -600000; k <= 600000; ++k) xs.push_back(static_cast<float>(k) * 1e-5f);  // [-6, 6] densely
  for (float t = 1e-38f; t < 1e-3f; t *= 1.01f) xs.push_back(t), xs.push_back(-t);
  for (float t : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 3.92f, -3.92f, 3.9200001f, 1.0f, -1.0f,
                  0.99999994f, 1e30f, -1e30f})
    xs.push_back(t);
  Graph cx;
  GraphTensor x = cx.tensor({static_cast<int64_t>(xs.size())});
  GraphTensor y = x.erf().output();
  auto cpu = cx.compile(cpu::CpuRuntime{}, CompileOptions().search_graph_limit(1));
  auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
  for (Runtime* rt : {static_cast<Runtime*>(&cpu), static_cast<Runtime*>(&ref)}) {
    rt->set_data(x, xs);
    rt->execute(cx.dim_map());
    const std::vector<float> got = rt->get_f32(y);
    double worst = 0;
    int reported = 0;
    for (size_t k = 0; k < xs.size(); ++k) {
      const double want = std::erf(static_cast<double>(xs[k]));
      const double g = got[k];
      bool ok;
      if (std::isnan(want)) ok = std::isnan(g);
      else if (want == 0) ok = g == 0 && std::signbit(g) == std::signbit(want);
      else {
        const double err = std::abs(g - want);
        ok = std::abs(xs[k]) < 1e-3f ? err <= 1e-6 * std::abs(want) + 1e-45 : err <= 2e-7;  // + a subnormal's rounding
        if (std::abs(xs[k]) >= 1e-3f) worst = std::max(worst, err);
      }
      if (!ok && reported++ < 10)
        ADD_FAILURE() << rt->name() << ": erf(" << xs[k] << ") = " << g << ", want " << want;
    }
    std::printf("[transcendentals] erf on %s: max abs error %.3g\n", std::string(rt->name()).c_str(), worst);
  }
}
