// Row-wise normalisations over a [rows, cols] matrix, one block per row:
//   RMSNorm  y = x * rsqrt(mean(x^2) + eps) * weight   (weight may be null)
//   softmax  y = exp(x - max) / sum(exp(x - max))      (online statistics: one pass)
// The statistics pass reads the row from DRAM; the output pass re-reads it from L1/L2
// (a row is a few KB), so DRAM sees one read and one write. 16-byte loads when the row
// length and pointers allow (`vectorized`), one element per thread-step otherwise.
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

}  // namespace lk

#define LUMINAL_RMSNORM_ENTRY(NAME, T)                                                                  \
  extern "C" __global__ void NAME(const T* x, const T* weight, T* y, int cols, float eps, int vectorized) { \
    lk::rmsnorm_row<T>(x, weight, y, cols, eps, vectorized);                                            \
  }
#define LUMINAL_SOFTMAX_ENTRY(NAME, T)                                                     \
  extern "C" __global__ void NAME(const T* x, T* y, int cols, int vectorized) {            \
    lk::softmax_row<T>(x, y, cols, vectorized);                                            \
  }
