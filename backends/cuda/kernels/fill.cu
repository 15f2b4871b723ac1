// Deterministic uniform random fill in [-scale, scale): benchmarks fill gigabytes of
// weights on the device instead of generating and copying them from the host, and the
// compiler makes a model segment's profiling and verification inputs with it. With
// `specials` 1, one element in 8 is a special value instead (the host's list in
// profiling_values: signed zeros, infinities, NaN, subnormals, +-1, values past F16's
// range); with 2, the same but the last two (large magnitudes).
namespace lk {

__device__ __forceinline__ unsigned hash32(unsigned x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}

template <class T>
__device__ __forceinline__ void fill_uniform(T* out, long long n, unsigned seed, float scale, int specials) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned h = hash32((unsigned)i ^ hash32(seed ^ hash32((unsigned)(i >> 32) + 0x9e3779b9u)));
    const float u = (float)(h >> 8) * (1.0f / 16777216.0f);
    float v = (2.0f * u - 1.0f) * scale;
    if (specials != 0 && (h & 7u) == 0) {
      const unsigned pick = hash32(h + 0x85ebca6bu) % (specials == 1 ? 11u : 9u);
      const float inf = __int_as_float(0x7f800000);
      const float special[11] = {0.0f, -0.0f, inf, -inf, __int_as_float(0x7fc00000), 1e-40f, -1e-40f,
                                 1.0f, -1.0f, 65504.0f, -3.0e38f};
      v = special[pick];
    }
    out[i] = from_float<T>(v);
  }
}

}  // namespace lk

// Holds the stream for `ns` nanoseconds (one thread spinning on the global timer): the op
// profile (LUMINAL_CUDA_PROFILE) enqueues one before each batch of timed launches, so that
// the GPU runs the batch back to back instead of waiting for the host to enqueue each op.
#define LUMINAL_HOLD_ENTRY(NAME)                                                          \
  extern "C" __global__ void NAME(long long ns) {                                         \
    unsigned long long start, now;                                                        \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));                             \
    do {                                                                                  \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));                             \
    } while ((long long)(now - start) < ns);                                              \
  }

#define LUMINAL_FILL_ENTRY(NAME, T) \
  extern "C" __global__ void NAME(T* out, long long n, unsigned seed, float scale, int specials) { \
    LK_GRID_ENTER();                                                                                \
    lk::fill_uniform<T>(out, n, seed, scale, specials);                                            \
  }
