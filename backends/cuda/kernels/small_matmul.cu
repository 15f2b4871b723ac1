// A small batched matmul whose sizes and strides change from run to run, read from device
// memory (the runtime's dims buffer) instead of launch arguments, so that a captured CUDA
// graph stays valid as they change: a decode step's attention over a cache that grows by
// one position per step (scores = q . k^T with n = length, out = p . v with k = length).
//   C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]          C packed as [batch, m, n]
//   A element (b, i, k) at a_off + b*a_bs + i*a_rs + k*a_cs; B's (b, k, j) likewise.
// params (int64): m, n, k, batch, a_off, a_rs, a_cs, a_bs, b_off, b_rs, b_cs, b_bs.
// A block of 8 warps takes one row (b, i) and 32 columns. When B is contiguous along k,
// each warp takes whole columns and its lanes split k (coalesced reads, a warp sum); when
// it is contiguous along j (and 16-byte aligned), a thread reads 16 bytes of a row of B and
// the block's thread rows split k; otherwise each lane takes a column and the warps split
// k. Partial sums are combined in shared memory in a fixed order. fp32 accumulation (four partial sums per thread, added in a fixed order),
// one rounding to T. Each product is rounded before it is
// added (no FMA), as the unrewritten Mul then SumReduce rounds it: a product past the
// float range is +-inf there too, and +inf and -inf products still sum to NaN. Blocks past the last tile leave (the
// runtime launches a grid rounded up, so that it holds while n grows).
namespace lk {

constexpr int kSmallMatmulWarps = 8;
// Each thread keeps this many partial sums, so that as many loads are in flight: a decode
// step's p . v walks ~500 keys per thread group, one dependent add after another.
constexpr int kUnroll = 4;
__device__ __forceinline__ float combine(const float (&acc)[kUnroll]) {
  return __fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3]));
}

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
      float acc[kUnroll] = {};
      long long kk = lane;
      for (; kk + (kUnroll - 1) * 32 < k; kk += kUnroll * 32)
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          acc[u] = __fadd_rn(acc[u], __fmul_rn(to_float(arow[(kk + u * 32) * a_cs]), to_float(bcol[kk + u * 32])));
      for (; kk < k; kk += 32) acc[0] = __fadd_rn(acc[0], __fmul_rn(to_float(arow[kk * a_cs]), to_float(bcol[kk])));
      const float sum = warp_sum(combine(acc));
      if (lane == 0) crow[j] = from_float<T>(sum);
    }
  } else if (b_cs == 1 && n % Pack<T>::N == 0 && (b_off | b_rs | b_bs) % Pack<T>::N == 0 &&
             reinterpret_cast<unsigned long long>(b) % 16 == 0) {
    // B contiguous along j (p . v over a [length, heads, dim] cache): each thread reads V
    // columns with one 16-byte load, TPR threads cover the tile's 32 columns, and the
    // block's SLICES rows of threads split k, summed in shared memory in a fixed order.
    // (One column per lane and 8 warps over k had each thread walk ~70 keys with 2-byte
    // loads: 29 us per decode step's p . v on the H200.)
    constexpr int V = Pack<T>::N;
    constexpr int TPR = 32 / V;
    constexpr int SLICES = kSmallMatmulWarps * 32 / TPR;
    __shared__ float partial[SLICES][32];
    const int slice = threadIdx.x / TPR, c0 = (threadIdx.x % TPR) * V;
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0.0f;
    if (j0 + c0 < n) {  // n is a multiple of V: the whole vector is in range
      const T* bvec = bmat + j0 + c0;
#pragma unroll 4
      for (long long kk = slice; kk < k; kk += SLICES) {
        const float x = to_float(arow[kk * a_cs]);
        float w[V];
        Pack<T>::unpack(__ldg(reinterpret_cast<const uint4*>(bvec + kk * b_rs)), w);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = __fadd_rn(acc[v], __fmul_rn(x, w[v]));
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) partial[slice][c0 + v] = acc[v];
    __syncthreads();
    if (threadIdx.x < 32 && j0 + threadIdx.x < n) {
      float sum = 0.0f;
      for (int sl = 0; sl < SLICES; ++sl) sum = __fadd_rn(sum, partial[sl][threadIdx.x]);
      crow[j0 + threadIdx.x] = from_float<T>(sum);
    }
  } else {
    __shared__ float partial[kSmallMatmulWarps][32];
    const long long j = j0 + lane;
    float acc[kUnroll] = {};
    if (j < n) {
      const T* bcol = bmat + j * b_cs;
      constexpr int W = kSmallMatmulWarps;
      long long kk = warp;
      for (; kk + (kUnroll - 1) * W < k; kk += kUnroll * W)
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          acc[u] = __fadd_rn(acc[u], __fmul_rn(to_float(arow[(kk + u * W) * a_cs]), to_float(bcol[(kk + u * W) * b_rs])));
      for (; kk < k; kk += W) acc[0] = __fadd_rn(acc[0], __fmul_rn(to_float(arow[kk * a_cs]), to_float(bcol[kk * b_rs])));
    }
    partial[warp][lane] = combine(acc);
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
    LK_GRID_ENTER();                                                                                  \
    lk::small_matmul<T>(a, b, c, params);                                                            \
  }
