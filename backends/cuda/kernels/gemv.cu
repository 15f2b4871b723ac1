// GEMV and skinny GEMM for 1..16 rows:
//   y[m, n] = act(sum_k x[m, k] * w[n, k] + bias[n]) + residual[m, n]
// x is [M, K], w is [N, K] (a linear layer's weight, row-major), y and residual [M, N].
// w may be of a narrower type TW than x and y (F32 activations with F16/BF16 weights): it
// is widened in registers, never copied.
// Decode is bandwidth-bound on w, so every warp streams rows of w with 16-byte loads
// (UNROLL of them in flight per lane, marked evict-first so they do not push x out of
// L1), keeps MMAX x RPW fp32 accumulators in registers, and the KSPLIT warps that share
// a row group split K (split-K inside the block), reduced through shared memory in a
// fixed order so results are deterministic.
namespace lk {

constexpr int kGemvWarps = 8;

// Weight prefetch before the grid dependency wait. Under programmatic dependent launch the
// blocks of a GEMV become resident while the kernel before it (a norm, RoPE, attention:
// a few microseconds, reading little) still runs; the weights never depend on that kernel,
// so each block asks the L2 for the start of its rows then, and DRAM streams weights
// through what would otherwise be a gap. The grid's requests are capped at
// kGemvPrefetchBytes: about what DRAM delivers during a short kernel, a fraction of the L2,
// so nothing prefetched is evicted before the GEMV reads it. A hint: it never faults
// (sm_90's bulk prefetch) and results do not depend on it. LK_GEMV_PREFETCH_MB (defined by
// the runtime from LUMINAL_GEMV_PREFETCH_MB; 0 compiles it out) sets the cap, to measure it.
#ifndef LK_GEMV_PREFETCH_MB
#define LK_GEMV_PREFETCH_MB 12
#endif
#define LK_GEMV_PREFETCH (LK_GEMV_PREFETCH_MB > 0)
constexpr long long kGemvPrefetchBytes = (long long)LK_GEMV_PREFETCH_MB << 20;

// The first warp asks the L2 for [base, base + bytes) in 4 KB requests (base 16-byte
// aligned, bytes a multiple of 16).
__device__ __forceinline__ void bulk_prefetch(unsigned long long base, long long bytes) {
#if LK_GEMV_PREFETCH && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr long long kChunk = 4096;
  for (long long off = (long long)threadIdx.x * kChunk; off < bytes; off += 32 * kChunk) {
    const unsigned size = (unsigned)(bytes - off < kChunk ? bytes - off : kChunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(size) : "memory");
  }
#endif
}

template <class TW>
__device__ __forceinline__ void prefetch_rows(const TW* w, long long first_row, long long rows, long long K,
                                              long long grid_blocks) {
#if LK_GEMV_PREFETCH && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x >= 32 || rows <= 0) return;
  unsigned long long begin = reinterpret_cast<unsigned long long>(w + first_row * K);
  long long bytes = rows * K * (long long)sizeof(TW);
  const long long cap = kGemvPrefetchBytes / (grid_blocks > 0 ? grid_blocks : 1);
  if (bytes > cap) bytes = cap;
  // The instruction takes a 16-byte aligned start and a multiple of 16 bytes: the start is
  // rounded down (the allocation is at least 256-byte aligned) and the length down.
  const unsigned long long aligned = begin & ~15ull;
  bulk_prefetch(aligned, (bytes + (long long)(begin - aligned)) & ~15ll);
#endif
}

template <class T, class TW, int MMAX, int RPW, int ACT, int UNROLL>
__device__ __forceinline__ void gemv(const T* __restrict__ x, const TW* __restrict__ w,
                                     const T* __restrict__ bias, const T* __restrict__ residual,
                                     T* __restrict__ y, int M, int N, int K, int ksplit, int vectorized,
                                     long long block) {
  __shared__ float partial[kGemvWarps][MMAX * RPW];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int groups = kGemvWarps / ksplit;
  const int group = warp / ksplit;
  const int slice = warp % ksplit;
  const long long n0 = (block * groups + group) * RPW;

  float acc[MMAX][RPW];
#pragma unroll
  for (int m = 0; m < MMAX; ++m)
#pragma unroll
    for (int r = 0; r < RPW; ++r) acc[m][r] = 0.0f;

  if (vectorized) {
    // V elements per 16-byte weight load; x is read as XV 16-byte loads covering them.
    constexpr int V = Pack<TW>::N;
    constexpr int XV = V / Pack<T>::N;
    static_assert(XV >= 1 && XV * Pack<T>::N == V, "x must be at least as wide as w");
    const int nvec = K / V;
    const int per = (nvec + ksplit - 1) / ksplit;
    const int begin = slice * per;
    const int end = min(nvec, begin + per);
    const uint4* wrow[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const long long row = n0 + r < N ? n0 + r : N - 1;  // clamped rows load, never store
      wrow[r] = reinterpret_cast<const uint4*>(w + row * K);
    }
    for (int v0 = begin + lane; v0 < end; v0 += 32 * UNROLL) {
      uint4 wv[UNROLL][RPW];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int v = v0 + u * 32;
#pragma unroll
        for (int r = 0; r < RPW; ++r) wv[u][r] = v < end ? __ldcs(wrow[r] + v) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int v = v0 + u * 32;
        if (v >= end) break;
        float wf[RPW][V];
#pragma unroll
        for (int r = 0; r < RPW; ++r) Pack<TW>::unpack(wv[u][r], wf[r]);
#pragma unroll
        for (int m = 0; m < MMAX; ++m) {
          if (m >= M) break;
          float xf[V];
          const uint4* xrow = reinterpret_cast<const uint4*>(x + (long long)m * K) + (long long)v * XV;
#pragma unroll
          for (int c = 0; c < XV; ++c) Pack<T>::unpack(__ldg(xrow + c), xf + c * Pack<T>::N);
#pragma unroll
          for (int r = 0; r < RPW; ++r)
#pragma unroll
            for (int j = 0; j < V; ++j) acc[m][r] = fmaf(xf[j], wf[r][j], acc[m][r]);
        }
      }
    }
  } else {
    // Any K and any alignment: one element per lane per step.
    const int per = (K + ksplit - 1) / ksplit;
    const int begin = slice * per;
    const int end = min(K, begin + per);
    for (int k = begin + lane; k < end; k += 32) {
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
        const long long row = n0 + r < N ? n0 + r : N - 1;
        const float wk = to_float(w[row * K + k]);
#pragma unroll
        for (int m = 0; m < MMAX; ++m)
          if (m < M) acc[m][r] = fmaf(to_float(x[(long long)m * K + k]), wk, acc[m][r]);
      }
    }
  }

#pragma unroll
  for (int m = 0; m < MMAX; ++m)
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const float s = warp_sum(acc[m][r]);
      if (lane == 0) partial[warp][m * RPW + r] = s;
    }
  __syncthreads();
  // The first warp of each row group sums its slices in order and applies the epilogue.
  if (slice == 0) {
    for (int i = lane; i < M * RPW; i += 32) {
      const int m = i / RPW;
      const long long n = n0 + i % RPW;
      if (n >= N) continue;
      float sum = 0.0f;
      for (int s = 0; s < ksplit; ++s) sum += partial[warp + s][i];
      if (bias) sum += to_float(bias[n]);
      sum = activate<ACT>(sum);
      if (residual) sum += to_float(residual[(long long)m * N + n]);
      y[(long long)m * N + n] = from_float<T>(sum);
    }
  }
}

// After its own work, a block asks the L2 for its share of `bytes` from `next`: the
// weights of the GEMV after this one (the runtime passes them). Blocks that finish early
// start it while the last ones still stream, and it goes on through the short kernels
// between the two GEMVs (norms, RoPE, attention), when DRAM would otherwise idle.
__device__ __forceinline__ void prefetch_next(const void* next, long long bytes) {
#if LK_GEMV_PREFETCH && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x >= 32 || !next || bytes < 16) return;
  const long long share = (bytes / gridDim.x + 15) & ~15ll;
  const long long begin = (long long)blockIdx.x * share;
  const long long end = begin + share < bytes ? begin + share : bytes & ~15ll;
  if (end > begin) bulk_prefetch(reinterpret_cast<unsigned long long>(next) + begin, end - begin);
#endif
}

}  // namespace lk

#define LUMINAL_GEMV_ENTRY(NAME, T, TW, MMAX, RPW, ACT, UNROLL)                                       \
  extern "C" __global__ void __launch_bounds__(lk::kGemvWarps * 32)                                   \
      NAME(const T* x, const TW* w, const T* bias, const T* residual, T* y, int M, int N, int K,       \
           int ksplit, int vectorized, const void* next, long long next_bytes) {                      \
    const int rows_per_block = (lk::kGemvWarps / ksplit) * RPW;                                        \
    const long long first = (long long)blockIdx.x * rows_per_block;                                    \
    lk::prefetch_rows(w, first, min((long long)rows_per_block, (long long)N - first), K, gridDim.x);  \
    LK_GRID_ENTER();                                                                                   \
    lk::gemv<T, TW, MMAX, RPW, ACT, UNROLL>(x, w, bias, residual, y, M, N, K, ksplit, vectorized, blockIdx.x); \
    lk::prefetch_next(next, next_bytes);                                                               \
  }

// Up to four GEMVs over the same x in one launch (launch_gemv_group): problem p takes the
// next ceil(n_p / rows per block) blocks; n_p = 0 marks an unused slot. No bias, residual
// or activation: siblings whose results go their own ways.
#define LUMINAL_GEMV_GROUP_ENTRY(NAME, T, TW, MMAX, RPW, UNROLL)                                         \
  extern "C" __global__ void __launch_bounds__(lk::kGemvWarps * 32)                                   \
      NAME(const T* x, const TW* w0, const TW* w1, const TW* w2, const TW* w3, T* y0, T* y1, T* y2, T* y3, \
           int n0, int n1, int n2, int n3, int M, int K, int ksplit, int vectorized, const void* next,  \
           long long next_bytes) {                                                                     \
    const int rows_per_block = (lk::kGemvWarps / ksplit) * RPW;                                        \
    const TW* w[4] = {w0, w1, w2, w3};                                                                 \
    T* y[4] = {y0, y1, y2, y3};                                                                        \
    const int n[4] = {n0, n1, n2, n3};                                                                 \
    long long block = blockIdx.x;                                                                      \
    for (int p = 0; p < 4; ++p) {                                                                      \
      const long long blocks = (n[p] + rows_per_block - 1) / rows_per_block;                           \
      if (block < blocks) {                                                                            \
        const long long first = block * rows_per_block;                                                \
        lk::prefetch_rows(w[p], first, min((long long)rows_per_block, (long long)n[p] - first), K, gridDim.x); \
        LK_GRID_ENTER();                                                                               \
        lk::gemv<T, TW, MMAX, RPW, 0, UNROLL>(x, w[p], nullptr, nullptr, y[p], M, n[p], K, ksplit,      \
                                              vectorized, block);                                      \
        lk::prefetch_next(next, next_bytes);                                                           \
        return;                                                                                        \
      }                                                                                                \
      block -= blocks;                                                                                 \
    }                                                                                                  \
  }
