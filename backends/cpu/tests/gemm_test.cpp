// gemm() and blas_gemm() against a double-precision reference, on every ISA this CPU
// has: odd sizes, transposed and strided operands, batches (broadcast too), bias, every
// epilogue, F16/BF16 weights, and non-finite values.
#include "luminal/cpu/gemm.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "luminal/cpu/blas_gemm.hpp"
#include "luminal/cpu/thread_pool.hpp"
#include "luminal/error.hpp"

using namespace luminal;
using namespace luminal::cpu;

namespace {

// ---- independent half-precision codecs (round to nearest even) ----
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
uint16_t to_bf16(float f) {
  const uint32_t u = bits_of(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
double from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t to_f16(float f) {
  // Only finite values in the normal and subnormal f16 range are generated.
  const double v = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (v == 0) return sign;
  int e = std::ilogb(v);  // v = m * 2^e, 1 <= m < 2
  if (e < -14) e = -14;   // subnormal: fixed exponent
  const double scaled = std::nearbyint(std::ldexp(v, 10 - e));  // 10 fraction bits (ties to even)
  uint32_t mant = static_cast<uint32_t>(scaled);
  if (mant >= 2048) {  // rounding carried into the next binade
    mant >>= 1;
    ++e;
  }
  if (mant < 1024) return static_cast<uint16_t>(sign | mant);  // subnormal
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | (mant - 1024));
}
double from_f16(uint16_t h) {
  const int e = (h >> 10) & 31, mant = h & 1023;
  const double magnitude = e == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, e - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

double activation(double x, Epilogue e) {
  switch (e) {
    case Epilogue::None: return x;
    case Epilogue::Relu: return x < 0 ? 0 : x;
    case Epilogue::GeluTanh: return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case Epilogue::GeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Epilogue::Silu: return x / (1 + std::exp(-x));
  }
  return x;
}

struct Case {
  int64_t m, n, k, batch = 1;
  bool trans_a = false, trans_b = false;
  int64_t pad = 0;   // extra elements per row of every operand (strided views)
  int64_t step = 1;  // spacing of the fast dim of A and B: > 1 leaves neither stride 1
  DType b_dtype = DType::F32;
  bool a_broadcast = false, b_broadcast = false;
  bool bias = false;
  Epilogue epilogue = Epilogue::None;
};

std::string describe(const Case& c) {
  std::ostringstream os;
  os << c.m << "x" << c.n << "x" << c.k << " batch " << c.batch << (c.trans_a ? " A^T" : "") << (c.trans_b ? " B^T" : "")
     << " pad " << c.pad << " step " << c.step << " " << dtype_name(c.b_dtype) << (c.a_broadcast ? " bcastA" : "")
     << (c.b_broadcast ? " bcastB" : "") << (c.bias ? " bias " : " ") << epilogue_name(c.epilogue);
  return os.str();
}

// Operands of a case in memory, plus everything the reference needs.
struct Problem {
  Case c;
  std::vector<float> a, bias, out;
  std::vector<float> b_f32;
  std::vector<uint16_t> b_half;
  GemmArgs args;

  double a_at(int64_t batch, int64_t i, int64_t p) const {
    return a[static_cast<size_t>(batch * args.a_batch_stride + i * args.a_row_stride + p * args.a_col_stride)];
  }
  double b_at(int64_t batch, int64_t p, int64_t j) const {
    const size_t idx = static_cast<size_t>(batch * args.b_batch_stride + p * args.b_row_stride + j * args.b_col_stride);
    switch (c.b_dtype) {
      case DType::F16: return from_f16(b_half[idx]);
      case DType::BF16: return from_bf16(b_half[idx]);
      default: return b_f32[idx];
    }
  }
};

Problem make_problem(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  auto value = [&] {
    const int kind = std::uniform_int_distribution<int>(0, 19)(rng);
    return kind == 0 ? 0.f : kind == 1 ? -0.f : kind == 2 ? 3.5f : uni(rng) * (kind == 3 ? 8.f : 1.f);
  };
  Problem pr;
  pr.c = c;
  GemmArgs& g = pr.args;
  g.m = c.m, g.n = c.n, g.k = c.k, g.batch = c.batch;
  // A (m x k): row-major rows of k + pad, or stored transposed (k rows of m + pad).
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t a_ld = a_cols * c.step + c.pad;
  const int64_t a_batch = a_rows * a_ld + c.pad;
  g.a_row_stride = c.trans_a ? c.step : a_ld;
  g.a_col_stride = c.trans_a ? a_ld : c.step;
  g.a_batch_stride = c.a_broadcast ? 0 : a_batch;
  pr.a.resize(static_cast<size_t>((c.a_broadcast ? 1 : c.batch) * a_batch));
  for (float& x : pr.a) x = value();
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t b_ld = b_cols * c.step + c.pad;
  const int64_t b_batch = b_rows * b_ld + c.pad;
  g.b_row_stride = c.trans_b ? c.step : b_ld;
  g.b_col_stride = c.trans_b ? b_ld : c.step;
  g.b_batch_stride = c.b_broadcast ? 0 : b_batch;
  g.b_dtype = c.b_dtype;
  const size_t b_size = static_cast<size_t>((c.b_broadcast ? 1 : c.batch) * b_batch);
  if (c.b_dtype == DType::F32) {
    pr.b_f32.resize(b_size);
    for (float& x : pr.b_f32) x = value();
  } else {
    pr.b_half.resize(b_size);
    for (uint16_t& x : pr.b_half) x = c.b_dtype == DType::F16 ? to_f16(value()) : to_bf16(value());
  }
  g.c_row_stride = c.n + c.pad;
  g.c_batch_stride = c.m * g.c_row_stride + c.pad;
  pr.out.assign(static_cast<size_t>(c.batch * g.c_batch_stride), std::numeric_limits<float>::quiet_NaN());
  if (c.bias) {
    pr.bias.resize(static_cast<size_t>(c.n));
    for (float& x : pr.bias) x = value();
    g.bias = pr.bias.data();
  }
  g.epilogue = c.epilogue;
  g.a = pr.a.data();
  g.b = c.b_dtype == DType::F32 ? static_cast<const void*>(pr.b_f32.data()) : pr.b_half.data();
  g.c = pr.out.data();
  return pr;
}

// Runs `run` on fresh output and checks it against the reference; padding stays NaN
// (untouched).
void check(Problem& pr, const std::function<void(const GemmArgs&)>& run, const std::string& what) {
  std::fill(pr.out.begin(), pr.out.end(), std::numeric_limits<float>::quiet_NaN());
  run(pr.args);
  const GemmArgs& g = pr.args;
  std::vector<bool> written(pr.out.size(), false);
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          const double term = pr.a_at(b, i, p) * pr.b_at(b, p, j);
          sum += term;
          magnitude += std::fabs(term);
        }
        if (g.bias) sum += g.bias[j];
        const double expected = activation(sum, g.epilogue);
        const size_t idx = static_cast<size_t>(b * g.c_batch_stride + i * g.c_row_stride + j);
        written[idx] = true;
        const double tolerance = (2e-6 * static_cast<double>(g.k) + 2e-6) * (magnitude + std::fabs(sum) + 1);
        const double got = pr.out[idx];
        if (!(std::fabs(got - expected) <= tolerance)) {
          ADD_FAILURE() << what << " " << describe(pr.c) << ": C[" << b << "][" << i << "][" << j << "] = " << got
                        << ", expected " << expected;
          return;
        }
      }
    }
  }
  for (size_t idx = 0; idx < pr.out.size(); ++idx) {
    if (!written[idx] && !std::isnan(pr.out[idx])) {
      ADD_FAILURE() << what << " " << describe(pr.c) << ": wrote outside C at " << idx;
      return;
    }
  }
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Runs every case on every ISA (and through OpenBLAS where it applies).
void check_cases(const std::vector<Case>& cases) {
  const Isa saved = active_isa();
  uint32_t seed = 1;
  for (const Case& c : cases) {
    Problem pr = make_problem(c, seed++);
    for (Isa isa : supported_isas()) {
      pin_isa(isa);
      check(pr, gemm, std::string("gemm/") + std::string(isa_name(isa)));
      // The other algorithm on the same shape: GEMV for larger m, blocked for small m.
      force_gemm_path(c.m <= gemv_max_rows() ? GemmPath::Blocked : GemmPath::Gemv);
      check(pr, gemm, std::string("gemm/") + std::string(isa_name(isa)) + "/other-path");
      // B packed once beforehand (persisted weights), on the blocked path that reads it.
      if (pr.args.batch == 1 || pr.args.b_batch_stride == 0) {
        force_gemm_path(GemmPath::Blocked);
        EXPECT_TRUE(gemm_packs_b(pr.args)) << describe(c);
        const PackedB packed = pack_b(pr.args);
        pr.args.packed_b = &packed;
        check(pr, gemm, std::string("gemm/") + std::string(isa_name(isa)) + "/packed-b");
        pr.args.packed_b = nullptr;
        force_gemm_path(GemmPath::Auto);
      }
    }
    if (blas_supports(pr.args)) check(pr, [](const GemmArgs& g) { EXPECT_TRUE(blas_gemm(g)); }, "blas_gemm");
    if (testing::Test::HasFailure()) break;
  }
  pin_isa(saved);
}

}  // namespace

TEST(CpuGemm, OddSizesPlain) {
  std::vector<Case> cases;
  const int64_t sizes[] = {1, 3, 17, 63, 65, 129};
  for (int64_t m : sizes) {
    for (int64_t n : sizes) {
      cases.push_back({m, n, (m * 7 + n) % 129 + 1});
    }
  }
  cases.push_back({200, 300, 600});  // several depth blocks, edge tiles both ways
  // The MLP's and the Llama block's row counts (a last row panel of 4 or 2 rows of a 6-row
  // tile, of 4 or 8 of a 12-row one) over three depth blocks of unequal depth, with the
  // weight layout: with B packed beforehand, A is packed whole and each task runs every
  // depth block of its tiles.
  for (int64_t m : {64, 128}) {
    Case c{m, 100, 1000};
    c.trans_b = true;
    cases.push_back(c);
  }
  // More columns than one packed B block (4096): a partial last block.
  for (int64_t m : {2, 13}) {
    Case wide{m, 4100, 20};
    cases.push_back(wide);
    wide.trans_b = true;
    cases.push_back(wide);
  }
  // A task's range of B panels across the two column blocks, over two depth blocks.
  Case wide_deep{13, 4100, 500};
  wide_deep.trans_b = true;
  cases.push_back(wide_deep);
  check_cases(cases);
}

TEST(CpuGemm, TransposedAndStridedOperands) {
  std::vector<Case> cases;
  for (int64_t m : {1, 2, 5, 65}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (int64_t pad : {0, 3}) {
          Case c{m, 47, 129};
          c.trans_a = ta, c.trans_b = tb, c.pad = pad;
          cases.push_back(c);
          c.step = 2;  // no unit stride anywhere: the general packing paths
          cases.push_back(c);
        }
      }
    }
  }
  check_cases(cases);
}

TEST(CpuGemm, BatchedAndBroadcastBatches) {
  std::vector<Case> cases;
  for (int64_t m : {1, 3, 33}) {
    Case c{m, 40, 70, 3};
    cases.push_back(c);
    c.b_broadcast = true;  // one weight for every batch
    cases.push_back(c);
    c.b_broadcast = false;
    c.a_broadcast = true;
    c.trans_b = true;
    cases.push_back(c);
  }
  // One weight for every batch over several depth blocks: each batch's A packed whole.
  Case deep{33, 40, 900, 3};
  deep.b_broadcast = true;
  deep.trans_b = true;
  cases.push_back(deep);
  deep.pad = 3;
  deep.a_broadcast = true;
  cases.push_back(deep);
  check_cases(cases);
}

// Many tiny products (m * n * k <= 256 over 8 batches or more) run as plain loops over
// whole batches: every layout, broadcast batch, bias and epilogue, and the boundary sizes
// on both sides (252 and 280 multiply-adds, 7 and 8 batches).
TEST(CpuGemm, ManyTinyProducts) {
  std::vector<Case> cases;
  const Epilogue epilogues[] = {Epilogue::None, Epilogue::Relu, Epilogue::GeluErf, Epilogue::Silu};
  int variant = 0;
  for (auto [m, n, k] : {std::array<int64_t, 3>{4, 4, 4}, {1, 3, 5}, {3, 5, 2}, {6, 6, 7}, {5, 7, 8}, {2, 1, 1}}) {
    for (int64_t batch : {7, 8, 33}) {
      Case c{m, n, k, batch};
      c.trans_a = variant % 2 == 1;
      c.trans_b = variant % 3 == 1;
      c.pad = variant % 4 == 2 ? 3 : 0;
      c.step = variant % 5 == 3 ? 2 : 1;
      c.a_broadcast = variant % 7 == 4;
      c.b_broadcast = variant % 3 == 2;
      c.bias = variant % 2 == 0;
      c.epilogue = epilogues[variant % 4];
      cases.push_back(c);
      ++variant;
    }
  }
  check_cases(cases);
  // A NaN in one batch's A poisons that batch's row only; an infinity in B gives +-inf.
  const int64_t batch = 16, m = 2, n = 3, k = 2;
  std::vector<float> a(static_cast<size_t>(batch * m * k), 0.5f), b(static_cast<size_t>(batch * k * n), -0.25f),
      c(static_cast<size_t>(batch * m * n));
  a[static_cast<size_t>(5 * m * k + 1 * k + 1)] = std::numeric_limits<float>::quiet_NaN();  // batch 5, row 1
  b[static_cast<size_t>(9 * k * n + 0 * n + 2)] = std::numeric_limits<float>::infinity();   // batch 9, column 2
  GemmArgs g = GemmArgs::row_major(m, n, k, a.data(), b.data(), c.data());
  g.batch = batch;
  g.a_batch_stride = m * k;
  g.b_batch_stride = k * n;
  g.c_batch_stride = m * n;
  gemm(g);
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float v = c[static_cast<size_t>((bi * m + i) * n + j)];
        if (bi == 5 && i == 1) EXPECT_TRUE(std::isnan(v)) << bi << " " << i << " " << j;
        else if (bi == 9 && j == 2) EXPECT_EQ(v, std::numeric_limits<float>::infinity()) << bi << " " << i;
        else EXPECT_EQ(v, -0.25f) << bi << " " << i << " " << j;
      }
}

TEST(CpuGemm, BiasAndEveryEpilogue) {
  std::vector<Case> cases;
  for (Epilogue e : {Epilogue::None, Epilogue::Relu, Epilogue::GeluTanh, Epilogue::GeluErf, Epilogue::Silu}) {
    for (int64_t m : {1, 4, 37}) {
      Case c{m, 45, 33};
      c.epilogue = e;
      c.bias = m != 4;
      cases.push_back(c);
    }
  }
  check_cases(cases);
}

TEST(CpuGemm, HalfPrecisionWeights) {
  std::vector<Case> cases;
  for (DType dt : {DType::F16, DType::BF16}) {
    for (int64_t m : {1, 3, 7, 64}) {
      for (bool tb : {false, true}) {
        Case c{m, 70, 300};
        c.b_dtype = dt, c.trans_b = tb, c.pad = m == 3 ? 2 : 0, c.bias = true, c.epilogue = Epilogue::Silu;
        cases.push_back(c);
      }
    }
    // Packed half panels over three depth blocks and a last row panel of a few rows, and
    // over a second column block (4096 columns a block), both layouts.
    for (bool tb : {false, true}) {
      Case deep{64, 100, 1000};
      deep.b_dtype = dt, deep.trans_b = tb;
      cases.push_back(deep);
      Case wide{13, 4100, 20};
      wide.b_dtype = dt, wide.trans_b = tb;
      cases.push_back(wide);
    }
    Case batched{5, 33, 65, 2};
    batched.b_dtype = dt, batched.b_broadcast = true;
    cases.push_back(batched);
    Case strided{2, 19, 40};
    strided.b_dtype = dt, strided.step = 3;
    cases.push_back(strided);
    strided.m = 30;
    cases.push_back(strided);
  }
  check_cases(cases);
}

// A half-precision weight packed once keeps its own dtype (half the bytes of F32 panels)
// where the ISA's micro-kernel widens it, and F32 panels elsewhere (AVX-512 for now).
TEST(CpuGemm, PackedHalfWeightsKeepTheirBytes) {
  const Isa saved = active_isa();
  std::vector<float> a(64 * 300), c(64 * 70);
  std::vector<uint16_t> b(300 * 70, 0x3f80);  // 1.0 in BF16
  for (Isa isa : supported_isas()) {
    pin_isa(isa);
    for (DType dt : {DType::F16, DType::BF16}) {
      const GemmArgs g = GemmArgs::row_major(64, 70, 300, a.data(), b.data(), c.data(), dt);
      const PackedB packed = pack_b(g);
      const bool half = isa != Isa::Avx512;
      EXPECT_EQ(packed.dtype, half ? dt : DType::F32) << isa_name(isa);
      EXPECT_EQ(packed.bytes(), 96 * 300 * (half ? 2 : 4)) << isa_name(isa);
      EXPECT_EQ(packed_b_bytes(g), packed.bytes()) << isa_name(isa);
    }
  }
  pin_isa(saved);
}

TEST(CpuGemm, EmptyDepthGivesTheEpilogueOfTheBias) {
  std::vector<float> c(6, 7.f), bias = {-1.f, 0.5f, 2.f};
  for (Isa isa : supported_isas()) {
    pin_isa(isa);
    GemmArgs g = GemmArgs::row_major(2, 3, 0, nullptr, nullptr, c.data());
    g.bias = bias.data();
    g.epilogue = Epilogue::Relu;
    gemm(g);
    EXPECT_EQ(c, (std::vector<float>{0.f, 0.5f, 2.f, 0.f, 0.5f, 2.f}));
  }
  pin_isa(best_isa());
}

TEST(CpuGemm, NonFiniteValuesPropagate) {
  // A NaN in row 1 of A poisons row 1 of C only; an inf in column 2 of B gives +-inf or
  // NaN (inf * 0) in column 2 exactly as IEEE says.
  for (int64_t m : {1, 20}) {
    for (Isa isa : supported_isas()) {
      pin_isa(isa);
      const int64_t n = 40, k = 9;
      std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
      for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i % 7) + 0.5f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = -0.125f * static_cast<float>(i % 5) - 0.25f;
      if (m > 1) a[static_cast<size_t>(1 * k + 4)] = std::numeric_limits<float>::quiet_NaN();
      b[static_cast<size_t>(3 * n + 2)] = std::numeric_limits<float>::infinity();
      gemm(GemmArgs::row_major(m, n, k, a.data(), b.data(), c.data()));
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const float v = c[static_cast<size_t>(i * n + j)];
          if (i == 1) {
            EXPECT_TRUE(std::isnan(v)) << isa_name(isa) << " C[1][" << j << "]";
          } else if (j == 2) {
            EXPECT_EQ(v, std::numeric_limits<float>::infinity()) << isa_name(isa) << " C[" << i << "][2]";
          } else {
            EXPECT_TRUE(std::isfinite(v) && v < 0) << isa_name(isa) << " C[" << i << "][" << j << "] = " << v;
          }
        }
      }
    }
  }
  pin_isa(best_isa());
}

// Packed half panels carry every special value through their widening: -0, +-inf, NaN,
// and sums that overflow F32 give exactly what F32 panels of the same values give.
TEST(CpuGemm, PackedHalfWeightsKeepSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType dt : {DType::BF16, DType::F16}) {
    for (Isa isa : supported_isas()) {
      pin_isa(isa);
      const int64_t m = 20, n = 40, k = 9;
      std::vector<float> a(static_cast<size_t>(m * k));
      for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i % 7) + 0.5f - (i % 3 == 0 ? 2.f : 0.f);
      std::vector<uint16_t> half(static_cast<size_t>(k * n));
      std::vector<float> wide(half.size());
      const float big = dt == DType::BF16 ? 3e38f : 60000.f;  // BF16: sums past F32's range
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) {
          float v = -0.125f * static_cast<float>((p + j) % 5) + 0.25f;
          if (j == 2 && p == 3) v = inf;
          if (j == 5 && p == 1) v = -inf;
          if (j == 7 && p == 0) v = std::numeric_limits<float>::quiet_NaN();
          if (j == 11) v = -0.f;
          if (j == 17 || j == 33) v = p % 2 ? big : -big;
          if (j == 18) v = big;
          const size_t idx = static_cast<size_t>(p * n + j);
          half[idx] = dt == DType::BF16 ? to_bf16(v) : to_f16(v);
          wide[idx] = static_cast<float>(dt == DType::BF16 ? from_bf16(half[idx]) : from_f16(half[idx]));
        }
      std::vector<float> c_half(static_cast<size_t>(m * n)), c_wide(c_half.size());
      GemmArgs gh = GemmArgs::row_major(m, n, k, a.data(), half.data(), c_half.data(), dt);
      GemmArgs gw = GemmArgs::row_major(m, n, k, a.data(), wide.data(), c_wide.data());
      const PackedB ph = pack_b(gh), pw = pack_b(gw);
      gh.packed_b = &ph;
      gw.packed_b = &pw;
      gemm(gh);
      gemm(gw);
      bool saw_overflow = false;
      for (size_t i = 0; i < c_half.size(); ++i) {
        saw_overflow = saw_overflow || (std::isinf(c_wide[i]) && i % n == 18);
        if (std::isnan(c_wide[i])) {
          EXPECT_TRUE(std::isnan(c_half[i])) << dtype_name(dt) << " " << isa_name(isa) << " at " << i;
        } else {
          EXPECT_EQ(std::memcmp(&c_half[i], &c_wide[i], sizeof(float)), 0)
              << dtype_name(dt) << " " << isa_name(isa) << " at " << i << ": " << c_half[i] << " against " << c_wide[i];
        }
      }
      if (dt == DType::BF16) {
        EXPECT_TRUE(saw_overflow) << isa_name(isa);  // the case is not vacuous
      }
    }
  }
  pin_isa(best_isa());
}

TEST(CpuGemm, RejectsBadArguments) {
  std::vector<float> a(4), b(4), c(4);
  GemmArgs g = GemmArgs::row_major(2, 2, 2, a.data(), b.data(), c.data());
  g.b_dtype = DType::I32;
  EXPECT_THROW(gemm(g), Error);
  g = GemmArgs::row_major(2, 2, 2, a.data(), b.data(), c.data());
  g.c_row_stride = 1;
  EXPECT_THROW(gemm(g), Error);
  g = GemmArgs::row_major(-1, 2, 2, a.data(), b.data(), c.data());
  EXPECT_THROW(gemm(g), Error);
  g = GemmArgs::row_major(2, 2, 2, nullptr, b.data(), c.data());
  EXPECT_THROW(gemm(g), Error);
  g = GemmArgs::row_major(2, 2, 2, a.data(), b.data(), c.data());
  g.batch = 2;
  g.c_batch_stride = 2;
  EXPECT_THROW(gemm(g), Error);
}

// blas_gemm cuts C into blocks (along the longer of m and n) that the pool's tasks run as
// single-threaded cblas_sgemm calls: blocks of rows of transposed, padded operands with
// bias and epilogue, blocks of columns (the bias read at the block's offset), and batches.
TEST(CpuGemm, BlasBlocksOverThePool) {
  std::vector<Case> cases;
  Case rows{300, 70, 90};
  rows.trans_a = rows.trans_b = true, rows.pad = 3, rows.bias = true, rows.epilogue = Epilogue::GeluErf;
  cases.push_back(rows);
  Case cols{20, 500, 33};
  cols.bias = true, cols.epilogue = Epilogue::Relu;
  cases.push_back(cols);
  Case batches{150, 40, 30, 3};
  batches.epilogue = Epilogue::Silu;
  cases.push_back(batches);
  check_cases(cases);
}

TEST(CpuGemm, BlasDeclinesWhatItCannotDoAndRefusesPoolTasks) {
  std::vector<float> a(16, 1.f), c(16);
  std::vector<uint16_t> b(16, to_bf16(1.f));
  GemmArgs g = GemmArgs::row_major(4, 4, 4, a.data(), b.data(), c.data(), DType::BF16);
  EXPECT_FALSE(blas_supports(g));
  EXPECT_FALSE(blas_gemm(g));
  std::vector<float> bf(16, 1.f);
  g = GemmArgs::row_major(4, 4, 4, a.data(), bf.data(), c.data());
  g.a_row_stride = 8, g.a_col_stride = 2;  // no unit stride: not expressible as lda
  EXPECT_FALSE(blas_supports(g));
  g = GemmArgs::row_major(4, 4, 4, a.data(), bf.data(), c.data());
  EXPECT_TRUE(blas_gemm(g));
  EXPECT_EQ(c[5], 4.f);
  EXPECT_EQ(blas_threads(), 1);  // single-threaded OpenBLAS: the pool's tasks run it
  ThreadPool pool(2);
  std::atomic<int> refused{0};
  pool.parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    try {
      blas_gemm(g);
    } catch (const Error&) {
      ++refused;
    }
  });
  EXPECT_EQ(refused.load(), 2);
}

TEST(CpuGemm, PinIsaRejectsWhatTheCpuLacks) {
  for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (isa_supported(isa)) {
      EXPECT_NO_THROW(pin_isa(isa));
      EXPECT_EQ(active_isa(), isa);
    } else {
      EXPECT_THROW(pin_isa(isa), Error);
    }
  }
  pin_isa(best_isa());
}

// A packed B that does not fit the call (another ISA, another shape) is ignored, never
// misread; pack_b refuses a B that differs between batches.
// Products of one A with their own packed weights (q, k, v): gemm_group packs A once and
// runs them in one region, with every result bit for bit what gemm() gives alone. Members
// of unequal widths (a second 4096-column block among them), B dtypes and layouts; a
// member with another A sends the whole group through gemm().
TEST(CpuGemm, GroupedProductsShareA) {
  const Isa saved = active_isa();
  struct Member {
    int64_t n;
    DType dt;
    bool trans_b;
  };
  const Member members[] = {{100, DType::F32, true}, {33, DType::BF16, true}, {4100, DType::F16, false}};
  for (Isa isa : supported_isas()) {
    pin_isa(isa);
    for (bool other_a : {false, true}) {
      std::vector<Problem> prs;
      uint32_t seed = 70;
      for (const Member& mb : members) {
        Case c{64, mb.n, 1000};
        c.b_dtype = mb.dt, c.trans_b = mb.trans_b;
        prs.push_back(make_problem(c, seed++));
      }
      for (size_t i = 1; i < prs.size(); ++i) prs[i].a = prs[0].a;  // one A (same layout: same m, k)
      std::vector<PackedB> packed;
      for (auto& pr : prs) packed.push_back(pack_b(pr.args));
      std::vector<GemmArgs> args;
      for (size_t i = 0; i < prs.size(); ++i) {
        prs[i].args.a = prs[other_a && i == 2 ? 2 : 0].a.data();
        prs[i].args.packed_b = &packed[i];
        prs[i].args.c = prs[i].out.data();
        args.push_back(prs[i].args);
      }
      for (size_t i = 0; i < prs.size(); ++i) {
        const std::string what = std::string("gemm_group/") + std::string(isa_name(isa)) +
                                 (other_a ? "/another-A" : "") + " member " + std::to_string(i);
        check(prs[i], [&](const GemmArgs&) { gemm_group(args); }, what);
        std::vector<float> alone(prs[i].out.size());
        GemmArgs single = prs[i].args;
        single.c = alone.data();
        gemm(single);
        for (int64_t r = 0; r < single.m; ++r)
          for (int64_t j = 0; j < single.n; ++j) {
            const size_t idx = static_cast<size_t>(r * single.c_row_stride + j);
            ASSERT_EQ(std::memcmp(&alone[idx], &prs[i].out[idx], sizeof(float)), 0)
                << what << ": C[" << r << "][" << j << "] " << prs[i].out[idx] << " against " << alone[idx] << " alone";
          }
      }
    }
  }
  pin_isa(saved);
}

TEST(CpuGemm, PackedBIsUsedOnlyWhereItFits) {
  const Isa saved = active_isa();
  Problem pr = make_problem({40, 70, 300}, 11);
  const PackedB packed = pack_b(pr.args);
  for (Isa isa : supported_isas()) {
    pin_isa(isa);
    pr.args.packed_b = &packed;  // packed for `saved`: read only when isa == saved
    check(pr, gemm, std::string("foreign packed-b/") + std::string(isa_name(isa)));
  }
  pin_isa(saved);
  Problem other = make_problem({40, 69, 300}, 12);
  other.args.packed_b = &packed;  // n differs
  check(other, gemm, "packed-b of another shape");
  Problem batched = make_problem({9, 20, 30, 3}, 13);
  EXPECT_FALSE(gemm_packs_b(batched.args));
  EXPECT_THROW(pack_b(batched.args), Error);
  Problem small = make_problem({2, 20, 30}, 14);
  EXPECT_FALSE(gemm_packs_b(small.args));  // the GEMV path reads B in place
}
