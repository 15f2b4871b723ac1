// A small batched matmul whose sizes and strides change from run to run, read from device
// memory (the runtime's dims buffer) instead of launch arguments, so that a captured CUDA
// graph stays valid as they change: a decode step's attention over a cache that grows by
// one position per step (scores = q . k^T with n = length, out = p . v with k = length).
//   C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]          C packed as [batch, m, n]
//   A element (b, i, k) at a_off + b*a_bs + i*a_rs + k*a_cs; B's (b, k, j) likewise.
// params (int64): m, n, k, batch, a_off, a_rs, a_cs, a_bs, b_off, b_rs, b_cs, b_bs.
// A block of 8 warps takes one row (b, i) and 32 columns. When B is contiguous along k,
// each warp takes whole columns and its lanes split k (coalesced reads, a warp sum);
// otherwise each lane takes a column and the warps split k, summed in shared memory in a
// fixed order. fp32 accumulation, one rounding to T. Each product is rounded before it is
// added (no FMA), as the unrewritten Mul then SumReduce rounds it: a product past the
// float range is +-inf there too, and +inf and -inf products still sum to NaN. Blocks past the last tile leave (the
// runtime launches a grid rounded up, so that it holds while n grows).
namespace lk {

constexpr int kSmallMatmulWarps = 8;

template <class T>
__device__ __forceinline__ void small_matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                                             const long long* __restrict__ params) {
  const long long m = params[0], n = params[1], k = params[2], batch = params[3];
  const long long a_off = params[4], a_rs = params[5], a_cs = params[6], a_bs = params[7];
  const long long b_off = params[8], b_rs = params[9], b_cs = params[10], b_bs = params[11];
  const long long tiles = (n + 31) / 32;
  const long long block = blockIdx.x;
  if (block >= batch * m * tiles) return;  // the whole block: no barrier is skipped
  const long long row = block / tiles, j0 = (block % tiles) * 32;
  const long long bi = row / m, i = row % m;
  const T* arow = a + a_off + bi * a_bs + i * a_rs;
  const T* bmat = b + b_off + bi * b_bs;
  T* crow = c + row * n;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (b_rs == 1) {
    for (int jj = warp; jj < 32; jj += kSmallMatmulWarps) {
      const long long j = j0 + jj;
      if (j >= n) break;  // the same for the whole warp
      const T* bcol = bmat + j * b_cs;
      float acc = 0.0f;
      for (long long kk = lane; kk < k; kk += 32)
        acc = __fadd_rn(acc, __fmul_rn(to_float(arow[kk * a_cs]), to_float(bcol[kk])));
      acc = warp_sum(acc);
      if (lane == 0) crow[j] = from_float<T>(acc);
    }
  } else {
    __shared__ float partial[kSmallMatmulWarps][32];
    const long long j = j0 + lane;
    float acc = 0.0f;
    if (j < n)
      for (long long kk = warp; kk < k; kk += kSmallMatmulWarps)
        acc = __fadd_rn(acc, __fmul_rn(to_float(arow[kk * a_cs]), to_float(bmat[kk * b_rs + j * b_cs])));
    partial[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && j < n) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kSmallMatmulWarps; ++w) sum += partial[w][lane];
      crow[j] = from_float<T>(sum);
    }
  }
}

}  // namespace lk

#define LUMINAL_SMALL_MATMUL_ENTRY(NAME, T)                                                          \
  extern "C" __global__ void __launch_bounds__(lk::kSmallMatmulWarps * 32)                           \
      NAME(const T* a, const T* b, T* c, const long long* params) {                                  \
    lk::small_matmul<T>(a, b, c, params);                                                            \
  }
