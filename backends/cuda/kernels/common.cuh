// Shared device helpers for every kernel source. NVRTC compiles each module as
// common.cuh + one family file + a line of extern "C" entry points.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Programmatic dependent launch (sm_90+): the runtime may start a kernel while the previous
// one in the stream finishes (device.hpp, launch_kernel). Every entry point waits here,
// before reading anything, until that kernel has completed and its writes are visible, and
// then lets the next kernel launch: its blocks are scheduled as soon as all of this grid's
// blocks have started (the last wave is resident), so its launch and prologue overlap this
// kernel's work instead of following it. Correctness does not depend on where the trigger
// is: the next kernel's wait still holds it until this grid has completed. A no-op for an
// ordinary launch.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LK_GRID_ENTER() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define LK_GRID_ENTER()
#endif

// NVRTC has no <cmath>: minus infinity spelled by its bits.
#define LK_NEG_INF __int_as_float(0xff800000)

namespace lk {

// A 16-byte vector of T, and its conversion to float lanes.
template <class T> struct Pack;
template <> struct Pack<float> {
  static constexpr int N = 4;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
  }
};
template <> struct Pack<__half> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) { float2 v = __half22float2(h[i]); f[2 * i] = v.x; f[2 * i + 1] = v.y; }
  }
};
template <> struct Pack<__nv_bfloat16> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) { float2 v = __bfloat1622float2(h[i]); f[2 * i] = v.x; f[2 * i + 1] = v.y; }
  }
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The larger of a and b, NaN if either is (as the reference's MaxReduce).
__device__ __forceinline__ float nan_max(float a, float b) { return (b != b || b > a) ? b : a; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Epilogue activations; the numbers match luminal::cuda::Activation. expf, not an exp2
// chain with a truncated log2(e) (a lesson the original paid for).
enum Act { ACT_NONE = 0, ACT_RELU = 1, ACT_SILU = 2, ACT_GELU_TANH = 3 };
template <int ACT>
__device__ __forceinline__ float activate(float v) {
  if (ACT == ACT_RELU) return fmaxf(v, 0.0f);
  if (ACT == ACT_SILU) return v / (1.0f + expf(-v));
  if (ACT == ACT_GELU_TANH) return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  return v;
}

}  // namespace lk

namespace lk {

// Block-wide sum; every thread gets the result. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

// Online-softmax statistics: running max and the sum of exp(x - max), merged pairwise
// (Milakov and Gimelshein), so one pass over the data yields both.
struct MaxSum {
  float max, sum;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == LK_NEG_INF) return {m, 0.0f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}
__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)};
    v = merge(v, other);
  }
  return v;
}
// Block-wide merge; `scratch` holds 32 MaxSums.
__device__ __forceinline__ MaxSum block_merge(MaxSum v, MaxSum* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_merge(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : MaxSum{LK_NEG_INF, 0.0f};
  return warp_merge(v);
}

}  // namespace lk
