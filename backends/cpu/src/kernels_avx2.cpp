// AVX2 + FMA kernel table (this file is compiled with -mavx2 -mfma -mf16c): a 6 x 16
// micro-tile, 12 accumulators + 2 B vectors + 1 broadcast of the 16 ymm registers.
#include <immintrin.h>

#include <cstdint>

#include "kernels.hpp"

namespace luminal::cpu::detail {
namespace {

constexpr int kMr = 6, kNr = 16;

void convert_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j))));
  }
  for (; j < n; ++j) dst[j] = _cvtsh_ss(src[j]);
}

struct Vec {
  using type = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kRegisters = 16;
  static type zero() { return _mm256_setzero_ps(); }
  static type load(const float* p) { return _mm256_loadu_ps(p); }
  static type load_bf16(const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static type fmadd(type a, type b, type c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(type v) {
    const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
  }
};

#include "kernels_common.inc"

// A B panel's depth step (kNr = 16 values) as two vectors of columns 0-7 and 8-15.
struct F32Step {
  using Element = float;
  static void load(const float* b, __m256& b0, __m256& b1) {
    b0 = _mm256_load_ps(b);
    b1 = _mm256_load_ps(b + 8);
  }
};
// A half panel's step is one 32-byte load, widened in registers. BF16 is laid out for
// unpacking against zero (half_panel_position with W = 8): the low four values of each
// lane become columns 0-7, the high four 8-15, 2 shuffles a step where a zero-extend and
// a shift per 8 values would take 4. F16 is in column order (vcvtph2ps per 8 values).
struct Bf16Step {
  using Element = uint16_t;
  static void load(const uint16_t* b, __m256& b0, __m256& b1) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    b0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), raw));
    b1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), raw));
  }
};
struct F16Step {
  using Element = uint16_t;
  static void load(const uint16_t* b, __m256& b0, __m256& b1) {
    b0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    b1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8)));
  }
};

// The first R rows of a micro-tile (R = kMr: the whole tile) over a B panel whose steps
// Step loads; the A panel keeps its kMr stride.
template <int R, class Step = F32Step>
void micro_n(int64_t kc, const float* a, const typename Step::Element* b, float* c, int64_t ldc, bool accumulate) {
  // Fetch the C tile while the k loop runs, and B 512 bytes ahead (as in the AVX-512 kernel).
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(b) + 512, _MM_HINT_T0);
    __m256 b0, b1;
    Step::load(b, b0, b1);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
    a += kMr;
    b += kNr;
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (accumulate) {
      acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(cr));
      acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(cr + 8));
    }
    _mm256_storeu_ps(cr, acc[r][0]);
    _mm256_storeu_ps(cr + 8, acc[r][1]);
  }
}

void micro(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  micro_n<kMr>(kc, a, b, c, ldc, accumulate);
}

void micro_half(int64_t rows, int64_t kc, const float* a, const uint16_t* b, DType b_dtype, float* c, int64_t ldc,
                bool accumulate) {
  if (b_dtype == DType::BF16) {
    with_row_count<kMr>(rows, [&](auto r) { micro_n<decltype(r)::value, Bf16Step>(kc, a, b, c, ldc, accumulate); });
  } else if (b_dtype == DType::F16) {
    with_row_count<kMr>(rows, [&](auto r) { micro_n<decltype(r)::value, F16Step>(kc, a, b, c, ldc, accumulate); });
  } else {
    unsupported_b_dtype(b_dtype);
  }
}

void micro_rows(int64_t rows, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  with_row_count<kMr>(rows, [&](auto r) { micro_n<decltype(r)::value>(kc, a, b, c, ldc, accumulate); });
}

// A panel of rows [0, mv) of A (row r at a + r * lda, contiguous over p < kc):
// dst[p * kMr + r], zero for r >= mv. Eight columns at a time are transposed in registers
// (the scalar loop wrote one float per cycle or less, strided).
void pack_a(int64_t mv, int64_t kc, const float* a, int64_t lda, float* dst) {
  static_assert(kMr == 6, "the transpose below writes six rows");
  int64_t p = 0;
  if (mv == kMr) {
    for (; p + 8 <= kc; p += 8) {
      const float* src = a + p;
      const __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lda);
      const __m256 r2 = _mm256_loadu_ps(src + 2 * lda), r3 = _mm256_loadu_ps(src + 3 * lda);
      const __m256 r4 = _mm256_loadu_ps(src + 4 * lda), r5 = _mm256_loadu_ps(src + 5 * lda);
      // t0: r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5]; t1: the same for 2, 3 | 6, 7.
      const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      // Rows 0-3 of column c (c < 4 in the low half, c + 4 in the high half).
      const __m256 c0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 c1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 c2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 c3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
      // Column c's rows 0-3: the low halves of c0..c3 for c < 4, the high halves after.
      const __m128 rows03[8] = {_mm256_castps256_ps128(c0),   _mm256_castps256_ps128(c1),
                                _mm256_castps256_ps128(c2),   _mm256_castps256_ps128(c3),
                                _mm256_extractf128_ps(c0, 1), _mm256_extractf128_ps(c1, 1),
                                _mm256_extractf128_ps(c2, 1), _mm256_extractf128_ps(c3, 1)};
      // Rows 4-5 of columns (0, 1), (2, 3), (4, 5), (6, 7): t4's low half, t5's, t4's high, t5's.
      const __m128 rows45[4] = {_mm256_castps256_ps128(t4), _mm256_castps256_ps128(t5), _mm256_extractf128_ps(t4, 1),
                                _mm256_extractf128_ps(t5, 1)};
      float* d = dst + p * kMr;
      for (int c = 0; c < 8; ++c) {
        _mm_storeu_ps(d + c * kMr, rows03[c]);
        auto* pair = reinterpret_cast<__m64*>(d + c * kMr + 4);
        if (c % 2 == 0) _mm_storel_pi(pair, rows45[c / 2]);
        else _mm_storeh_pi(pair, rows45[c / 2]);
      }
    }
  }
  for (; p < kc; ++p) {
    for (int64_t r = 0; r < kMr; ++r) dst[p * kMr + r] = r < mv ? a[r * lda + p] : 0.f;
  }
}

}  // namespace

const Kernels& avx2_kernels() {
  static const Kernels table{Isa::Avx2,  kMr,       kNr,       384,        micro, convert_any, gemv_rows,
                             gemv_cols,  epilogue,  micro_rows, pack_a,   micro_half, /*bf16_unpack_width=*/8};
  return table;
}

}  // namespace luminal::cpu::detail
