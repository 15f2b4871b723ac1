// The portable kernel table: plain loops the compiler vectorises for the baseline ISA.
#include <cstdint>

#include "kernels.hpp"
#include "luminal/error.hpp"

namespace luminal::cpu::detail {
namespace {

constexpr int kMr = 4, kNr = 8;  // 8 accumulator registers: 4 x 16 spilled the 16 SSE registers (3x slower)

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign != 0 ? -magnitude : magnitude;
  }
  uint32_t bits = exponent == 31 ? sign | 0x7f800000u | (mantissa << 13)           // inf, NaN
                                 : sign | ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

void convert_f16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = half_to_float(src[j]);
}

// Four lanes of plain floats; the compiler maps them onto whatever the baseline has.
struct Vec {
  struct type {
    float lane[4];
  };
  static constexpr int kWidth = 4;
  static constexpr int kRegisters = 16;
  static type zero() { return {{0.f, 0.f, 0.f, 0.f}}; }
  static type load(const float* p) { return {{p[0], p[1], p[2], p[3]}}; }
  static type load_bf16(const uint16_t* p) {
    type v;
    for (int l = 0; l < 4; ++l) {
      const uint32_t bits = uint32_t{p[l]} << 16;
      __builtin_memcpy(&v.lane[l], &bits, sizeof(float));
    }
    return v;
  }
  static type fmadd(type a, type b, type c) {
    for (int l = 0; l < 4; ++l) c.lane[l] += a.lane[l] * b.lane[l];
    return c;
  }
  static float sum(type v) { return (v.lane[0] + v.lane[1]) + (v.lane[2] + v.lane[3]); }
};

#include "kernels_common.inc"

// The first `rows` rows of a micro-tile; `widen(p, values)` gives depth step p of the B
// panel as kNr floats.
template <class Widen>
void micro_tile(int64_t rows, int64_t kc, const float* a, float* c, int64_t ldc, bool accumulate, Widen widen) {
  float acc[kMr][kNr] = {};
  for (int64_t p = 0; p < kc; ++p) {
    float bv[kNr];
    widen(p, bv);
    for (int r = 0; r < kMr; ++r) {
      for (int j = 0; j < kNr; ++j) acc[r][j] += a[r] * bv[j];
    }
    a += kMr;
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    for (int j = 0; j < kNr; ++j) cr[j] = accumulate ? cr[j] + acc[r][j] : acc[r][j];
  }
}

void micro(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  micro_tile(kMr, kc, a, c, ldc, accumulate, [b](int64_t p, float* bv) {
    for (int j = 0; j < kNr; ++j) bv[j] = b[p * kNr + j];
  });
}

// micro over a half panel (columns in order), each step widened first.
void micro_half(int64_t rows, int64_t kc, const float* a, const uint16_t* b, DType b_dtype, float* c, int64_t ldc,
                bool accumulate) {
  if (b_dtype == DType::F16) {
    micro_tile(rows, kc, a, c, ldc, accumulate, [b](int64_t p, float* bv) {
      for (int j = 0; j < kNr; ++j) bv[j] = half_to_float(b[p * kNr + j]);
    });
  } else if (b_dtype == DType::BF16) {
    micro_tile(rows, kc, a, c, ldc, accumulate, [b](int64_t p, float* bv) {
      for (int j = 0; j < kNr; ++j) {
        const uint32_t bits = uint32_t{b[p * kNr + j]} << 16;
        __builtin_memcpy(&bv[j], &bits, sizeof(float));
      }
    });
  } else {
    unsupported_b_dtype(b_dtype);
  }
}

}  // namespace

void unsupported_b_dtype(DType dt) { LUMINAL_ASSERT(false, "cpu kernels: B dtype ", dtype_name(dt), " reached a kernel"); }

const Kernels& generic_kernels() {
  static const Kernels table{Isa::Generic, kMr,     kNr,     256,        micro, convert_any, gemv_rows,
                             gemv_cols,    epilogue, nullptr, nullptr, micro_half};
  return table;
}

}  // namespace luminal::cpu::detail
