// Matrix multiplication kernels of the CPU backend.
//
//   C[b] = act(A[b] @ B[b] + bias)   for b in [0, batch)
//
// A is F32; B (usually the weights) is F32, F16 or BF16 and stays in its dtype: it is
// converted while being packed into cache-sized panels (or, on the GEMV path, in small
// strips; a weight packed once keeps half panels where the ISA widens them in the
// micro-kernel), never expanded into an F32 copy. Every operand takes element strides, so a
// transposed or strided view needs no copy; a batch stride of 0 broadcasts.
//
// Two implementations compete per shape (the search measures both): gemm(), our own
// blocked SIMD GEMM, and blas_gemm() in blas_gemm.hpp (OpenBLAS).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "luminal/dtype.hpp"

namespace luminal::cpu {

enum class Epilogue : uint8_t { None, Relu, GeluTanh, GeluErf, Silu };
std::string_view epilogue_name(Epilogue e);
enum class Isa : uint8_t { Generic, Avx2, Avx512 };

// B packed once, laid out as the blocked path packs it on every call (panels of the ISA's
// width): for a B that does not change between calls, such as a persisted weight. Made by
// pack_b(); the caller keeps it while B is unchanged. An F16 or BF16 B stays in its dtype
// (`dtype`) where the ISA's micro-kernel widens half panels in registers (AVX2, generic),
// so a model's packed weights cost their own bytes, not an F32 copy; else F32 panels.
struct PackedB {
  int64_t k = 0, n = 0;
  Isa isa = Isa::Generic;
  DType dtype = DType::F32;              // of the panels' elements
  std::shared_ptr<std::byte[]> panels;  // 64-byte aligned
  int64_t bytes() const;
};

struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  // A: m x k F32. Element (i, p) of batch b: a[b * a_batch_stride + i * a_row_stride + p * a_col_stride].
  const float* a = nullptr;
  int64_t a_row_stride = 0, a_col_stride = 1, a_batch_stride = 0;
  // B: k x n of b_dtype. Element (p, j): b[b * b_batch_stride + p * b_row_stride + j * b_col_stride].
  // A PyTorch Linear weight W[n, k] is B = W^T: b_row_stride = 1, b_col_stride = k.
  const void* b = nullptr;
  DType b_dtype = DType::F32;
  int64_t b_row_stride = 0, b_col_stride = 1, b_batch_stride = 0;
  // C: m x n F32, rows contiguous. Element (i, j): c[b * c_batch_stride + i * c_row_stride + j].
  float* c = nullptr;
  int64_t c_row_stride = 0, c_batch_stride = 0;
  const float* bias = nullptr;  // n values added to every row, or null
  Epilogue epilogue = Epilogue::None;
  // B already packed (pack_b of these B arguments), or null. Used by the blocked path when
  // its k, n and ISA match and B is the same for every batch; ignored otherwise.
  const PackedB* packed_b = nullptr;

  // Row-major contiguous A (m x k), B (k x n), C (m x n); one batch.
  static GemmArgs row_major(int64_t m, int64_t n, int64_t k, const float* a, const void* b, float* c,
                            DType b_dtype = DType::F32);
};

// Throws luminal::Error naming the problem when the arguments are inconsistent
// (negative sizes, null operands, unsupported dtypes, C rows that overlap).
void validate(const GemmArgs& args);

// Our GEMM, parallel on ThreadPool::global(). Small m (decode) takes a GEMV path that
// streams B once, N-parallel. Call it from outside pool tasks for parallelism (inside
// one it runs serially).
void gemm(const GemmArgs& args);

// Products that share A (the same operand, m, k and batch; an attention block's q, k and
// v projections, an MLP's gate and up), each with its own B and C: where every B is packed
// beforehand (packed_b) and the blocked path takes them, A is packed once and all run in
// one parallel region; otherwise each runs as gemm(). Same results as gemm() on each.
void gemm_group(std::span<const GemmArgs> products);

// B of `args` (batch 1, or a B broadcast over the batch) packed for the active ISA's
// blocked path, on the pool. Costs packed_b_bytes(args).
PackedB pack_b(const GemmArgs& args);
// What pack_b(args) will allocate: round_up(n, 32) * k elements of the panels' dtype, at most.
int64_t packed_b_bytes(const GemmArgs& args);
// Would gemm(args) read a packed B (the blocked path, with B shared by every batch)?
bool gemm_packs_b(const GemmArgs& args);

// ---- which algorithm (tests and benchmarks) ----
// Auto: GEMV for m <= gemv_max_rows() when B has a unit stride, else blocked. Gemv
// applies only where B has a unit stride (else blocked runs).
enum class GemmPath : uint8_t { Auto, Blocked, Gemv };
void force_gemm_path(GemmPath path);
int64_t gemv_max_rows();

// ---- instruction sets ----
std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);  // by this CPU (and this build)
Isa best_isa();               // the widest supported
// The ISA gemm() uses: best_isa(), or the LUMINAL_CPU_ISA environment variable
// (generic, avx2, avx512) read on first use, or the last pin_isa().
Isa active_isa();
// Force an ISA (tests, benchmarks). Throws luminal::Error when the CPU lacks it.
void pin_isa(Isa isa);

}  // namespace luminal::cpu
