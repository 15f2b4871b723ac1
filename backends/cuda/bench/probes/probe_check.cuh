// The probes' one error check: a failed CUDA runtime call prints itself and ends the probe.
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
