#include "luminal/cpu/blas_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernels.hpp"
#include "luminal/cpu/thread_pool.hpp"
#include "luminal/error.hpp"

namespace luminal::cpu {
namespace {

// How a strided operand maps onto cblas's row-major (lda) form.
struct BlasOperand {
  bool ok = false;
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int64_t ld = 0;
};

// rows x cols with the given strides, as a row-major matrix or the transpose of one.
// cblas requires ld >= max(1, cols) (row-major) or >= max(1, rows) (transposed).
BlasOperand as_blas(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (rows == 1 || row_stride >= std::max<int64_t>(1, cols))) {
    return {true, CblasNoTrans, std::max<int64_t>({row_stride, cols, 1})};
  }
  if (row_stride == 1 && (cols == 1 || col_stride >= std::max<int64_t>(1, rows))) {
    return {true, CblasTrans, std::max<int64_t>({col_stride, rows, 1})};
  }
  return {};
}

// OpenBLAS runs single-threaded, inside the pool's tasks. Given threads of its own, it
// kept them spinning for ~0.1 s after every call (its THREAD_TIMEOUT, read once at load),
// on the very cores the pool's next kernel ran on: our own GEMM measured right after an
// OpenBLAS call ran at half speed (2 cores, 157 against 281 GFLOP/s).
void configure_threads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

constexpr int64_t kIntMax = 2147483647;
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A task's block of C: rows [i0, i1), columns [j0, j1) of one batch.
struct Block {
  int64_t batch, i0, i1, j0, j1;
};

// Blocks enough for every pool thread, cut along the longer of m and n (rows in multiples
// of 8, columns of 64: whole micro-tiles for OpenBLAS), at least 64 x 64 each.
std::vector<Block> blocks(const GemmArgs& g, int threads) {
  std::vector<Block> out;
  const int64_t per_batch = std::max<int64_t>(1, ceil_div(threads, g.batch));
  const bool by_rows = g.m >= g.n;
  const int64_t extent = by_rows ? g.m : g.n, quantum = by_rows ? 8 : 64;
  const int64_t parts = std::clamp<int64_t>(extent / 64, 1, per_batch);
  const int64_t step = std::max<int64_t>(quantum, (ceil_div(extent, parts) + quantum - 1) / quantum * quantum);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t x = 0; x < extent; x += step) {
      const int64_t y = std::min(extent, x + step);
      out.push_back(by_rows ? Block{b, x, y, 0, g.n} : Block{b, 0, g.m, x, y});
    }
  return out;
}

}  // namespace

int blas_threads() {
  configure_threads();
  return 1;
}

bool blas_supports(const GemmArgs& g) {
  if (g.b_dtype != DType::F32) return false;
  if (g.m > kIntMax || g.n > kIntMax || g.k > kIntMax) return false;
  return as_blas(g.m, g.k, g.a_row_stride, g.a_col_stride).ok && as_blas(g.k, g.n, g.b_row_stride, g.b_col_stride).ok;
}

bool blas_gemm(const GemmArgs& g) {
  validate(g);
  if (!blas_supports(g)) return false;
  LUMINAL_CHECK(!ThreadPool::in_task(), "blas_gemm: called from inside a thread-pool task (it runs its own tasks)");
  if (g.m == 0 || g.n == 0) return true;
  configure_threads();
  const BlasOperand a = as_blas(g.m, g.k, g.a_row_stride, g.a_col_stride);
  const BlasOperand b = as_blas(g.k, g.n, g.b_row_stride, g.b_col_stride);
  const int64_t ldc = std::max<int64_t>({g.c_row_stride, g.n, 1});
  const float* b_data = static_cast<const float*>(g.b);
  const detail::Kernels& kern = detail::active_kernels();
  ThreadPool& pool = ThreadPool::global();
  const std::vector<Block> work = blocks(g, pool.num_threads());
  pool.parallel_for(0, static_cast<int64_t>(work.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const Block& w = work[static_cast<size_t>(t)];
      float* c = g.c + w.batch * g.c_batch_stride + w.i0 * ldc + w.j0;
      const int64_t rows = w.i1 - w.i0, cols = w.j1 - w.j0;
      if (g.k == 0) {
        for (int64_t i = 0; i < rows; ++i) std::fill(c + i * ldc, c + i * ldc + cols, 0.f);
      } else {
        // Rows i0.. of A and columns j0.. of B, whichever way each is stored.
        const float* a_block = g.a + w.batch * g.a_batch_stride + w.i0 * g.a_row_stride;
        const float* b_block = b_data + w.batch * g.b_batch_stride + w.j0 * g.b_col_stride;
        cblas_sgemm(CblasRowMajor, a.trans, b.trans, static_cast<int>(rows), static_cast<int>(cols),
                    static_cast<int>(g.k), 1.f, a_block, static_cast<int>(a.ld), b_block, static_cast<int>(b.ld), 0.f, c,
                    static_cast<int>(ldc));
      }
      if (g.bias != nullptr || g.epilogue != Epilogue::None)
        for (int64_t i = 0; i < rows; ++i) kern.epilogue(c + i * ldc, cols, g.bias ? g.bias + w.j0 : nullptr, g.epilogue);
    }
  });
  return true;
}

}  // namespace luminal::cpu
