// The per-ISA kernel table behind gemm(). Each ISA's translation unit is compiled with
// its own -m flags and fills one table; the driver (gemm.cpp, baseline flags) picks a
// table at run time and does the blocking, packing and threading.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "luminal/cpu/gemm.hpp"

namespace luminal::cpu::detail {

struct Kernels {
  Isa isa;
  int mr, nr;  // micro-tile rows and columns
  // Depth of a packed block (BLIS's kc), at most kMaxDepthBlock: A and B panels of this
  // depth are what the micro-kernel streams from L1/L2. Per table: 384 measured faster
  // than 256 on an AVX2-only EPYC (110 against ~102 GFLOP/s at 1024^3, OpenBLAS's Haswell
  // depth too), while the AVX-512 tables' B panels already fill L1 at 256.
  int kc;
  // C[mr x nr] (row stride ldc) = (accumulate ? C : 0) + sum_p a[p*mr + r] * b[p*nr + j],
  // over kc steps of packed panels.
  void (*micro)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);
  // dst[0:n] = src[0:n] as F32; src is contiguous of dtype dt (F32, F16 or BF16).
  void (*convert)(const void* src, DType dt, float* dst, int64_t n);
  // GEMV with B rows contiguous (b_col_stride 1): for i < m, j < w:
  //   out[i*ldo + j] = sum_p a[i*lda + p] * B[p*ldb + j].
  void (*gemv_rows)(int64_t m, int64_t k, const float* a, int64_t lda, const void* b, DType dt, int64_t ldb,
                    int64_t w, float* out, int64_t ldo);
  // GEMV with B columns contiguous (b_row_stride 1, e.g. a Linear weight): for i < m, j < w:
  //   out[i*ldo + j] = sum_p a[i*lda + p] * B[j*ldb + p].
  void (*gemv_cols)(int64_t m, int64_t k, const float* a, int64_t lda, const void* b, DType dt, int64_t ldb,
                    int64_t w, float* out, int64_t ldo);
  // x[j] = act(x[j] + bias[j]) for j < n (bias may be null).
  void (*epilogue)(float* x, int64_t n, const float* bias, Epilogue e);
  // micro for the first `rows` (< mr) rows of a full-width tile, written straight to C: the
  // last row panel of an m that mr does not divide (m = 64: 4 rows of a 12-row panel) costs
  // its own rows, not a whole tile computed into a buffer. Null: `micro` and a buffer.
  void (*micro_rows)(int64_t rows, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);
  // The A panel of rows [0, mv) (mv <= mr; row r at a + r * lda, contiguous over kc steps):
  // dst[p * mr + r], zero for rows >= mv. Null: the driver's scalar loop.
  void (*pack_a)(int64_t mv, int64_t kc, const float* a, int64_t lda, float* dst) = nullptr;
  // micro over B panels kept in half precision (b_dtype F16 or BF16: 2 bytes an element,
  // each step's nr values in half_panel_position order), widened in registers, for the
  // first `rows` (<= mr) rows of a full-width tile. A weight packed once (pack_b) then
  // costs its own bytes, not an F32 copy. Null: half weights are packed as F32.
  void (*micro_half)(int64_t rows, int64_t kc, const float* a, const uint16_t* b, DType b_dtype, float* c, int64_t ldc,
                     bool accumulate) = nullptr;
  // BF16 half panels are interleaved for a widening that unpacks a register of 2W values
  // against zero (W floats per vector; 0: columns in order). See half_panel_position.
  int bf16_unpack_width = 0;
};

// Where column j (< nr) of a half panel's step is stored. An unpack against zero widens
// the low and the high four 16-bit values of each 128-bit lane of a register holding 2W
// BF16 values (W = bf16_unpack_width): lane l's position l*8 + h*4 + e (h = 0 low, 1
// high) becomes column h*W + l*4 + e, so each register yields columns [0, W), then [W, 2W).
inline int64_t half_panel_position(const Kernels& kern, DType b_dtype, int64_t j) {
  const int64_t w = kern.bf16_unpack_width;
  if (b_dtype != DType::BF16 || w == 0) return j;
  const int64_t group = j / (2 * w), c = j % (2 * w), h = c / w, l = c % w / 4, e = c % 4;
  return group * 2 * w + l * 8 + h * 4 + e;
}

inline constexpr int kMaxDepthBlock = 512;

// micro_rows from an ISA's micro_n<R> (R rows of a tile): `call(std::integral_constant<int,
// R>{})` for R = rows when 1 <= rows < Mr, else for R = Mr. One instantiation per row
// count, chosen at run time, without a switch to keep in step with Mr.
template <int Mr, class Call>
void with_row_count(int64_t rows, Call&& call) {
  [&]<int... R>(std::integer_sequence<int, R...>) {
    const bool done = ((rows == R + 1 ? (call(std::integral_constant<int, R + 1>{}), true) : false) || ...);
    if (!done) call(std::integral_constant<int, Mr>{});
  }(std::make_integer_sequence<int, Mr - 1>{});
}

// The table of active_isa().
const Kernels& active_kernels();
const Kernels& generic_kernels();
// A broken invariant (validate() admits only F32, F16, BF16 B). Out of line so the
// kernel TUs instantiate no error-formatting templates (see kernels_common.inc).
[[noreturn]] void unsupported_b_dtype(DType dt);
#if defined(LUMINAL_CPU_HAVE_X86_KERNELS)
const Kernels& avx2_kernels();
const Kernels& avx512_kernels();
#endif

}  // namespace luminal::cpu::detail
