// Deterministic uniform random fill in [-scale, scale): benchmarks fill gigabytes of
// weights on the device instead of generating and copying them from the host.
namespace lk {

__device__ __forceinline__ unsigned hash32(unsigned x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}

template <class T>
__device__ __forceinline__ void fill_uniform(T* out, long long n, unsigned seed, float scale) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned h = hash32((unsigned)i ^ hash32(seed ^ hash32((unsigned)(i >> 32) + 0x9e3779b9u)));
    const float u = (float)(h >> 8) * (1.0f / 16777216.0f);
    out[i] = from_float<T>((2.0f * u - 1.0f) * scale);
  }
}

}  // namespace lk

#define LUMINAL_FILL_ENTRY(NAME, T) \
  extern "C" __global__ void NAME(T* out, long long n, unsigned seed, float scale) { lk::fill_uniform<T>(out, n, seed, scale); }
