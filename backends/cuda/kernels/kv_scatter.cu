// In-place scatter of new K and V rows into a KV cache: rows [0, new_len) of `k_new` and
// `v_new` ([batch, kv_heads, new_len, HEAD_DIM], contiguous) land at positions
// [start, start + new_len) of the caches (element (b, h, p, d) at b*stride_b + h*stride_h +
// p*stride_p + d). `start` comes from `start_ptr` (device memory) when set, so a captured
// CUDA graph keeps appending as the position advances. Positions past `capacity` are
// dropped rather than written out of bounds. 16-byte copies when the head dim allows.
namespace lk {

template <class T>
__device__ __forceinline__ void kv_scatter(const T* __restrict__ k_new, const T* __restrict__ v_new,
                                           T* __restrict__ k_cache, T* __restrict__ v_cache, int kv_heads,
                                           int new_len, int head_dim, int start, const int* start_ptr, int capacity,
                                           long long stride_b, long long stride_h, long long stride_p,
                                           int vectorized) {
  const int first = start_ptr ? *start_ptr : start;
  const int V = vectorized ? 16 / (int)sizeof(T) : 1;
  const int chunks = head_dim / V;
  const long long per_batch = (long long)kv_heads * new_len * chunks;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < per_batch; i += (long long)gridDim.x * blockDim.x) {
    const int b = blockIdx.y;
    const int c = (int)(i % chunks);
    const int t = (int)((i / chunks) % new_len);
    const int h = (int)(i / ((long long)chunks * new_len));
    const int p = first + t;
    if (p < 0 || p >= capacity) continue;
    const long long src = (((long long)b * kv_heads + h) * new_len + t) * head_dim + c * V;
    const long long dst = b * stride_b + h * stride_h + p * stride_p + c * V;
    if (vectorized) {
      *reinterpret_cast<uint4*>(k_cache + dst) = *reinterpret_cast<const uint4*>(k_new + src);
      *reinterpret_cast<uint4*>(v_cache + dst) = *reinterpret_cast<const uint4*>(v_new + src);
    } else {
      k_cache[dst] = k_new[src];
      v_cache[dst] = v_new[src];
    }
  }
}

}  // namespace lk

#define LUMINAL_KV_SCATTER_ENTRY(NAME, T)                                                                       \
  extern "C" __global__ void NAME(const T* k_new, const T* v_new, T* k_cache, T* v_cache, int kv_heads,         \
                                  int new_len, int head_dim, int start, const int* start_ptr, int capacity,    \
                                  long long stride_b, long long stride_h, long long stride_p, int vectorized) { \
    LK_GRID_ENTER();                                                                                             \
    lk::kv_scatter<T>(k_new, v_new, k_cache, v_cache, kv_heads, new_len, head_dim, start, start_ptr, capacity, \
                      stride_b, stride_h, stride_p, vectorized);                                               \
  }
