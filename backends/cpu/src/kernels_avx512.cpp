// AVX-512F kernel table (this file is compiled with -mavx512f -mavx2 -mfma -mf16c): a
// 12 x 32 micro-tile, 24 accumulators + 2 B vectors + 1 broadcast of the 32 zmm registers.
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused merge source,
// which -Wmaybe-uninitialized (and, in sanitizer builds, -Wuninitialized) reports at
// every call site: a GCC false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels.hpp"

namespace luminal::cpu::detail {
namespace {

constexpr int kMr = 12, kNr = 32;

void convert_f16(const uint16_t* src, float* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j))));
  }
  for (; j < n; ++j) dst[j] = _cvtsh_ss(src[j]);
}

struct Vec {
  using type = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kRegisters = 32;
  static type zero() { return _mm512_setzero_ps(); }
  static type load(const float* p) { return _mm512_loadu_ps(p); }
  static type load_bf16(const uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static type fmadd(type a, type b, type c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(type v) { return _mm512_reduce_add_ps(v); }
};

#include "kernels_common.inc"

// The first R rows of a micro-tile (R = kMr: the whole tile); the A panel keeps its kMr stride.
template <int R>
void micro_n(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  // Fetch the C tile while the k loop runs, and B eight steps ahead: measured 5-7%
  // less CPU time at 1024^3 (docs/CPU_BACKEND.md).
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
  }
  __m512 acc[R][2];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * kNr), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * kNr + 16), _MM_HINT_T0);
    const __m512 b0 = _mm512_load_ps(b);
    const __m512 b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
    a += kMr;
    b += kNr;
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (accumulate) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_loadu_ps(cr));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_loadu_ps(cr + 16));
    }
    _mm512_storeu_ps(cr, acc[r][0]);
    _mm512_storeu_ps(cr + 16, acc[r][1]);
  }
}

void micro(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  micro_n<kMr>(kc, a, b, c, ldc, accumulate);
}

void micro_rows(int64_t rows, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  with_row_count<kMr>(rows, [&](auto r) { micro_n<decltype(r)::value>(kc, a, b, c, ldc, accumulate); });
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels table{Isa::Avx512, kMr, kNr, 256, micro, convert_any, gemv_rows, gemv_cols, epilogue, micro_rows};
  return table;
}

}  // namespace luminal::cpu::detail
