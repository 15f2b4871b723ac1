// What the probes share: an error check (a failed CUDA runtime call prints itself and ends
// the probe) and random BF16 data.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::printf("probe: %s: %s\n", #x, cudaGetErrorString(e));                     \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Pseudo-random BF16 values in [-4, 4) (a hash of the index and the seed; the upper half of
// the float, truncated).
__global__ void fill_random_bf16(unsigned short* p, long long n, unsigned seed) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
    const float v = (x & 0xffffff) / 16777216.0f * 8.0f - 4.0f;
    p[i] = (unsigned short)(__float_as_uint(v) >> 16);
  }
}
