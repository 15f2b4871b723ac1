// A hardware probe for benchmark case 2's elementwise chain (y = silu(a) * b + c, BF16,
// three reads and a write of n elements): how fast can each way of writing that kernel go on
// this GPU? Not part of luminal; scripts/gpu builds it with nvcc (GPU_PROBE=1) and prints its
// lines, which decide what the emitter (src/kernel/emit.cpp) generates.
//
// Each variant runs over distinct buffers larger than the L2, timed with CUDA events (median
// of 20 launches), and prints microseconds and GB/s beside a plain 16-byte copy.
//
//   nvcc -O3 -arch=sm_90 -o elementwise_probe elementwise_probe.cu && ./elementwise_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "probe_util.cuh"

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// The chain on one element as the emitter writes it: each step rounded to BF16 (the
// graph's dtype), an IEEE reciprocal (`precise`) or the approximate one.
template <bool precise, bool rounded>
__device__ __forceinline__ float chain(float a, float b, float c) {
  float e = exp2f((rounded ? round_bf16(-a) : -a) * 1.44269504f);
  if (rounded) e = round_bf16(e);
  float d = rounded ? round_bf16(e + 1.0f) : e + 1.0f;
  float r = precise ? 1.0f / d : __frcp_rn(d);
  if (!precise) asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  if (rounded) r = round_bf16(r);
  float s = rounded ? round_bf16(a * r) : a * r;
  float m = rounded ? round_bf16(s * b) : s * b;
  return m + c;
}

// One 16-byte chunk (8 values) of the chain.
template <bool precise, bool rounded>
__device__ __forceinline__ uint4 chain8(uint4 a, uint4 b, uint4 c) {
  const __nv_bfloat16* pa = reinterpret_cast<const __nv_bfloat16*>(&a);
  const __nv_bfloat16* pb = reinterpret_cast<const __nv_bfloat16*>(&b);
  const __nv_bfloat16* pc = reinterpret_cast<const __nv_bfloat16*>(&c);
  uint4 y;
  __nv_bfloat16* py = reinterpret_cast<__nv_bfloat16*>(&y);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    py[k] = __float2bfloat16_rn(chain<precise, rounded>(__bfloat162float(pa[k]), __bfloat162float(pb[k]), __bfloat162float(pc[k])));
  return y;
}

enum class Load { Plain, Streaming, NoAllocate };

template <Load load>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (load == Load::Streaming) return __ldcs(p);
  if constexpr (load == Load::NoAllocate) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
  }
  return *p;
}

// `chunks` 16-byte chunks per thread, loads of all of them issued before any compute; a
// grid-stride loop when the grid is smaller than the chunks.
template <int chunks, bool compute, bool precise, bool rounded, Load load>
__global__ void __launch_bounds__(256) chain_kernel(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                    const uint4* __restrict__ c, uint4* __restrict__ y, long long n16) {
  const long long stride = (long long)gridDim.x * blockDim.x * chunks;
  for (long long base = (long long)blockIdx.x * blockDim.x * chunks + threadIdx.x; base < n16; base += stride) {
    uint4 va[chunks], vb[chunks], vc[chunks];
#pragma unroll
    for (int j = 0; j < chunks; ++j) {
      const long long i = base + (long long)j * blockDim.x;
      if (i < n16) {
        va[j] = load16<load>(a + i);
        vb[j] = load16<load>(b + i);
        vc[j] = load16<load>(c + i);
      }
    }
#pragma unroll
    for (int j = 0; j < chunks; ++j) {
      const long long i = base + (long long)j * blockDim.x;
      if (i >= n16) break;
      uint4 out;
      if constexpr (compute) out = chain8<precise, rounded>(va[j], vb[j], vc[j]);
      else out = make_uint4(va[j].x ^ vb[j].x ^ vc[j].x, va[j].y ^ vb[j].y ^ vc[j].y, va[j].z ^ vb[j].z ^ vc[j].z,
                            va[j].w ^ vb[j].w ^ vc[j].w);
      if constexpr (load == Load::Plain) y[i] = out;
      else __stcs(y + i, out);
    }
  }
}

__global__ void copy_kernel(const uint4* __restrict__ a, uint4* __restrict__ y, long long n16) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (long long)gridDim.x * blockDim.x)
    y[i] = a[i];
}

template <typename Launch>
static double time_us(Launch&& launch) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaEventRecord(start));
    launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms[ms.size() / 2] * 1e3;
}

int main() {
  const long long n = 4096LL * 4096;  // BF16 elements per tensor
  const long long n16 = n / 8;
  uint4 *a, *b, *c, *y;
  CHECK(cudaMalloc(&a, n * 2));
  CHECK(cudaMalloc(&b, n * 2));
  CHECK(cudaMalloc(&c, n * 2));
  CHECK(cudaMalloc(&y, n * 2));
  CHECK(cudaMemset(a, 0x3f, n * 2));
  CHECK(cudaMemset(b, 0x3f, n * 2));
  CHECK(cudaMemset(c, 0x3f, n * 2));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"probe\": \"elementwise\", \"device\": \"%s\", \"sms\": %d}\n", prop.name, sms);

  auto report = [&](const char* name, double us, double bytes) {
    std::printf("{\"probe\": \"elementwise\", \"variant\": \"%s\", \"us\": %.2f, \"gb_per_s\": %.0f}\n", name, us,
                bytes / us * 1e-3);
  };
  const double chain_bytes = 4.0 * n * 2;
  report("copy_16B_grid_stride_sms_x16", time_us([&] { copy_kernel<<<sms * 16, 256>>>(a, y, n16); }), 2.0 * n * 2);
  report("copy_16B_one_per_thread", time_us([&] { copy_kernel<<<(n16 + 255) / 256, 256>>>(a, y, n16); }), 2.0 * n * 2);

  auto one_per_thread = [&](auto kernel, int chunks) {
    const long long blocks = (n16 + 256LL * chunks - 1) / (256LL * chunks);
    return time_us([&] { kernel<<<(unsigned)blocks, 256>>>(a, b, c, y, n16); });
  };
  auto resident = [&](auto kernel, int per_sm) {
    return time_us([&] { kernel<<<sms * per_sm, 256>>>(a, b, c, y, n16); });
  };
  report("mix31_xor_1chunk", one_per_thread(chain_kernel<1, false, true, true, Load::Plain>, 1), chain_bytes);
  report("mix31_xor_2chunks", one_per_thread(chain_kernel<2, false, true, true, Load::Plain>, 2), chain_bytes);
  report("mix31_xor_4chunks", one_per_thread(chain_kernel<4, false, true, true, Load::Plain>, 4), chain_bytes);
  report("mix31_xor_1chunk_streaming", one_per_thread(chain_kernel<1, false, true, true, Load::Streaming>, 1), chain_bytes);
  report("mix31_xor_2chunks_streaming", one_per_thread(chain_kernel<2, false, true, true, Load::Streaming>, 2), chain_bytes);
  report("mix31_xor_1chunk_resident_x8", resident(chain_kernel<1, false, true, true, Load::Plain>, 8), chain_bytes);
  report("mix31_xor_2chunks_resident_x8", resident(chain_kernel<2, false, true, true, Load::Plain>, 8), chain_bytes);
  report("chain_emitted_1chunk", one_per_thread(chain_kernel<1, true, true, true, Load::Plain>, 1), chain_bytes);
  report("chain_approx_rcp_1chunk", one_per_thread(chain_kernel<1, true, false, true, Load::Plain>, 1), chain_bytes);
  report("chain_unrounded_1chunk", one_per_thread(chain_kernel<1, true, true, false, Load::Plain>, 1), chain_bytes);
  report("chain_emitted_2chunks", one_per_thread(chain_kernel<2, true, true, true, Load::Plain>, 2), chain_bytes);
  report("chain_emitted_4chunks", one_per_thread(chain_kernel<4, true, true, true, Load::Plain>, 4), chain_bytes);
  report("chain_approx_rcp_2chunks", one_per_thread(chain_kernel<2, true, false, true, Load::Plain>, 2), chain_bytes);
  report("chain_emitted_2chunks_streaming", one_per_thread(chain_kernel<2, true, true, true, Load::Streaming>, 2), chain_bytes);
  report("chain_emitted_1chunk_noalloc", one_per_thread(chain_kernel<1, true, true, true, Load::NoAllocate>, 1), chain_bytes);
  report("chain_emitted_2chunks_resident_x8", resident(chain_kernel<2, true, true, true, Load::Plain>, 8), chain_bytes);
  report("chain_emitted_1chunk_resident_x8", resident(chain_kernel<1, true, true, true, Load::Plain>, 8), chain_bytes);
  return 0;
}
