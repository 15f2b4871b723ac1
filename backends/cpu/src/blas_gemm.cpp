#include "luminal/cpu/blas_gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <mutex>

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

int configure_threads() {
  static std::once_flag once;
  static int threads = 1;
  std::call_once(once, [] {
    threads = ThreadPool::global().num_threads();
    openblas_set_num_threads(threads);
  });
  return threads;
}

constexpr int64_t kIntMax = 2147483647;

}  // namespace

int blas_threads() { return configure_threads(); }

bool blas_supports(const GemmArgs& g) {
  if (g.b_dtype != DType::F32) return false;
  if (g.m > kIntMax || g.n > kIntMax || g.k > kIntMax) return false;
  return as_blas(g.m, g.k, g.a_row_stride, g.a_col_stride).ok && as_blas(g.k, g.n, g.b_row_stride, g.b_col_stride).ok;
}

bool blas_gemm(const GemmArgs& g) {
  validate(g);
  if (!blas_supports(g)) return false;
  LUMINAL_CHECK(!ThreadPool::in_task(),
                "blas_gemm: called from inside a thread-pool task; OpenBLAS would oversubscribe the cores");
  if (g.m == 0 || g.n == 0) return true;
  configure_threads();
  const BlasOperand a = as_blas(g.m, g.k, g.a_row_stride, g.a_col_stride);
  const BlasOperand b = as_blas(g.k, g.n, g.b_row_stride, g.b_col_stride);
  const int64_t ldc = std::max<int64_t>({g.c_row_stride, g.n, 1});
  const float* b_data = static_cast<const float*>(g.b);
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    float* c = g.c + bi * g.c_batch_stride;
    if (g.k == 0) {
      for (int64_t i = 0; i < g.m; ++i) std::fill(c + i * ldc, c + i * ldc + g.n, 0.f);
    } else {
      cblas_sgemm(CblasRowMajor, a.trans, b.trans, static_cast<int>(g.m), static_cast<int>(g.n),
                  static_cast<int>(g.k), 1.f, g.a + bi * g.a_batch_stride, static_cast<int>(a.ld),
                  b_data + bi * g.b_batch_stride, static_cast<int>(b.ld), 0.f, c, static_cast<int>(ldc));
    }
  }
  if (g.bias != nullptr || g.epilogue != Epilogue::None) {
    // On the pool, now that OpenBLAS has returned; the same epilogue code as gemm().
    const detail::Kernels& kern = detail::active_kernels();
    ThreadPool::global().parallel_for(0, g.batch * g.m, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        float* c = g.c + row / g.m * g.c_batch_stride + row % g.m * ldc;
        kern.epilogue(c, g.n, g.bias, g.epilogue);
      }
    });
  }
  return true;
}

}  // namespace luminal::cpu
