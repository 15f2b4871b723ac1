// Row-wise normalisations over a [rows, cols] matrix, one block per row:
//   RMSNorm  y = x * rsqrt(mean(x^2) + eps) * weight   (weight may be null)
//   softmax  y = exp(x - max) / sum(exp(x - max))      (online statistics: one pass)
// Rows up to 1024 threads x VPT 16-byte vectors (`*_cached`, VPT = 1, 2, 4, 8) are loaded
// into registers with every load issued before the first use, then reduced and written
// from registers: one DRAM read and one write, with a block's whole row in flight. Longer
// rows stream: the statistics pass reads the row from DRAM and the output pass re-reads it
// from L1/L2. 16-byte loads when the row length and pointers allow (`vectorized`), one
// element per thread-step otherwise.
namespace lk {

template <class T>
__device__ __forceinline__ void load_vector(const T* p, float* out) {
  Pack<T>::unpack(*reinterpret_cast<const uint4*>(p), out);
}
template <class T>
__device__ __forceinline__ void store_vector(T* p, const float* in) {
  constexpr int V = Pack<T>::N;
  alignas(16) T tmp[V];
#pragma unroll
  for (int j = 0; j < V; ++j) tmp[j] = from_float<T>(in[j]);
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(tmp);
}

template <class T>
__device__ __forceinline__ void rmsnorm_row(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
                                            int cols, float eps, int vectorized) {
  __shared__ float scratch[32];
  const long long row = blockIdx.x;
  x += row * cols;
  y += row * cols;
  constexpr int V = Pack<T>::N;
  float squares = 0.0f;
  if (vectorized) {
    for (int v = threadIdx.x; v < cols / V; v += blockDim.x) {
      float f[V];
      load_vector(x + v * V, f);
#pragma unroll
      for (int j = 0; j < V; ++j) squares = fmaf(f[j], f[j], squares);
    }
  } else {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float f = to_float(x[c]);
      squares = fmaf(f, f, squares);
    }
  }
  const float scale = rsqrtf(block_sum(squares, scratch) / (float)cols + eps);
  if (vectorized) {
    for (int v = threadIdx.x; v < cols / V; v += blockDim.x) {
      float f[V], w[V];
      load_vector(x + v * V, f);
      if (weight) load_vector(weight + v * V, w);
#pragma unroll
      for (int j = 0; j < V; ++j) f[j] = f[j] * scale * (weight ? w[j] : 1.0f);
      store_vector(y + v * V, f);
    }
  } else {
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
      y[c] = from_float<T>(to_float(x[c]) * scale * (weight ? to_float(weight[c]) : 1.0f));
  }
}

template <class T>
__device__ __forceinline__ void softmax_row(const T* __restrict__ x, T* __restrict__ y, int cols, int vectorized) {
  __shared__ MaxSum scratch[32];
  const long long row = blockIdx.x;
  x += row * cols;
  y += row * cols;
  constexpr int V = Pack<T>::N;
  MaxSum stats{LK_NEG_INF, 0.0f};
  if (vectorized) {
    for (int v = threadIdx.x; v < cols / V; v += blockDim.x) {
      float f[V];
      load_vector(x + v * V, f);
      float m = f[0];
#pragma unroll
      for (int j = 1; j < V; ++j) m = fmaxf(m, f[j]);
      float s = 0.0f;
      if (m != LK_NEG_INF) {
#pragma unroll
        for (int j = 0; j < V; ++j) s += expf(f[j] - m);
      }
      stats = merge(stats, MaxSum{m, s});
    }
  } else {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float f = to_float(x[c]);
      stats = merge(stats, MaxSum{f, f == LK_NEG_INF ? 0.0f : 1.0f});
    }
  }
  stats = block_merge(stats, scratch);
  const float inv = 1.0f / stats.sum;  // an all -inf row gives NaN, as PyTorch does
  if (vectorized) {
    for (int v = threadIdx.x; v < cols / V; v += blockDim.x) {
      float f[V];
      load_vector(x + v * V, f);
#pragma unroll
      for (int j = 0; j < V; ++j) f[j] = expf(f[j] - stats.max) * inv;
      store_vector(y + v * V, f);
    }
  } else {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[c] = from_float<T>(expf(to_float(x[c]) - stats.max) * inv);
  }
}

// Vector v of this thread's i-th slot: threadIdx.x + i * blockDim.x (coalesced per slot).
template <class T, int VPT>
__device__ __forceinline__ void load_row(const T* __restrict__ x, int vectors, float (&f)[VPT][Pack<T>::N]) {
  constexpr int V = Pack<T>::N;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < vectors) {
      load_vector(x + (long long)v * V, f[i]);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) f[i][j] = 0.0f;
    }
  }
}

template <class T, int VPT>
__device__ __forceinline__ void rmsnorm_row_cached(const T* __restrict__ x, const T* __restrict__ weight,
                                                   T* __restrict__ y, int cols, float eps) {
  __shared__ float scratch[32];
  constexpr int V = Pack<T>::N;
  const long long row = blockIdx.x;
  x += row * cols;
  y += row * cols;
  const int vectors = cols / V;
  float f[VPT][V];
  load_row<T, VPT>(x, vectors, f);
  float squares = 0.0f;
#pragma unroll
  for (int i = 0; i < VPT; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) squares = fmaf(f[i][j], f[i][j], squares);
  const float scale = rsqrtf(block_sum(squares, scratch) / (float)cols + eps);
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v >= vectors) continue;
    float w[V];
    if (weight) load_vector(weight + (long long)v * V, w);
#pragma unroll
    for (int j = 0; j < V; ++j) f[i][j] = f[i][j] * scale * (weight ? w[j] : 1.0f);
    store_vector(y + (long long)v * V, f[i]);
  }
}

template <class T, int VPT>
__device__ __forceinline__ void softmax_row_cached(const T* __restrict__ x, T* __restrict__ y, int cols) {
  __shared__ MaxSum scratch[32];
  constexpr int V = Pack<T>::N;
  const long long row = blockIdx.x;
  x += row * cols;
  y += row * cols;
  const int vectors = cols / V;
  float f[VPT][V];
  load_row<T, VPT>(x, vectors, f);
  // exp is taken once per element, against this thread's max; the block's max then
  // rescales each thread's values by one more exp (per thread, not per element).
  float m = LK_NEG_INF;
#pragma unroll
  for (int i = 0; i < VPT; ++i)
    if (threadIdx.x + i * blockDim.x < vectors)
#pragma unroll
      for (int j = 0; j < V; ++j) m = fmaxf(m, f[i][j]);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < VPT; ++i)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      // Slots past the row, and a thread whose values are all -inf, contribute 0.
      f[i][j] = (m == LK_NEG_INF || threadIdx.x + i * blockDim.x >= vectors) ? 0.0f : expf(f[i][j] - m);
      s += f[i][j];
    }
  const MaxSum stats = block_merge(MaxSum{m, s}, scratch);
  // An all -inf row: stats.sum is 0 and the max -inf, so the scale is NaN, as in PyTorch.
  const float scale = (m == LK_NEG_INF && stats.max != LK_NEG_INF ? 0.0f : expf(m - stats.max)) / stats.sum;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v >= vectors) continue;
#pragma unroll
    for (int j = 0; j < V; ++j) f[i][j] *= scale;
    store_vector(y + (long long)v * V, f[i]);
  }
}

}  // namespace lk

// NAME##_c<VPT>: the register-cached variants (16-byte aligned rows whose length is a
// multiple of the vector, at most 1024 x VPT vectors).
#define LUMINAL_ROWS_CACHED_ENTRIES(RMS, SOFT, T, VPT)                                                   \
  extern "C" __global__ void RMS##_c##VPT(const T* x, const T* weight, T* y, int cols, float eps) {      \
    LK_GRID_ENTER();                                                                                      \
    lk::rmsnorm_row_cached<T, VPT>(x, weight, y, cols, eps);                                             \
  }                                                                                                      \
  extern "C" __global__ void SOFT##_c##VPT(const T* x, T* y, int cols) { LK_GRID_ENTER(); lk::softmax_row_cached<T, VPT>(x, y, cols); }

#define LUMINAL_RMSNORM_ENTRY(NAME, T)                                                                  \
  extern "C" __global__ void NAME(const T* x, const T* weight, T* y, int cols, float eps, int vectorized) { \
    LK_GRID_ENTER();                                                                                     \
    lk::rmsnorm_row<T>(x, weight, y, cols, eps, vectorized);                                            \
  }
#define LUMINAL_SOFTMAX_ENTRY(NAME, T)                                                     \
  extern "C" __global__ void NAME(const T* x, T* y, int cols, int vectorized) {            \
    LK_GRID_ENTER();                                                                        \
    lk::softmax_row<T>(x, y, cols, vectorized);                                            \
  }
