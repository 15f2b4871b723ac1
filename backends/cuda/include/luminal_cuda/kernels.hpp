// Our own CUDA kernels: CUDA C sources (backends/cuda/kernels/*.cu, embedded at build
// time) compiled by NVRTC, one templated body per family and one extern "C" entry per
// variant, plus host launchers that choose grid and block from the shape.
#pragma once

#include <string>
#include <vector>

#include "luminal/dtype.hpp"
#include "luminal_cuda/compiler.hpp"
#include "luminal_cuda/device.hpp"

namespace luminal::cuda {

// Epilogue activations, in the order of lk::Act in kernels/common.cuh.
enum class Activation : int { None = 0, Relu = 1, Silu = 2, GeluTanh = 3 };
const char* activation_name(Activation a);

// F32, F16 and BF16 are the kernel dtypes; anything else throws naming the dtype.
const char* kernel_type_name(DType dtype);

// ---- GEMV / skinny GEMM (M = 1..16) ----
//   y[m, n] = act(sum_k x[m, k] * w[n, k] + bias[n]) + residual[m, n]
// x [M, K], w [N, K] (row-major, a linear layer's weight), bias [N], residual and y [M, N];
// all contiguous and of one dtype; bias and residual may be 0 (absent).
inline constexpr int kGemvMaxRows = 16;
struct GemvConfig {
  int ksplit = 0;         // warps of a block that split K: 1, 2, 4 or 8 (0: choose)
  int rows_per_warp = 0;  // output columns per warp: 1 or 2 (0: choose)
};
GemvConfig choose_gemv_config(int M, int N, int K, int sm_count);
// The source of one variant; `m_max` is the row capacity (1, 2, 4, 8 or 16).
KernelSource gemv_source(DType dtype, int m_max, int rows_per_warp, Activation act);
inline constexpr const char* kGemvKernelName = "luminal_gemv";

struct GemvArgs {
  DType dtype = DType::BF16;
  int M = 1, N = 0, K = 0;
  DevicePtr x = 0, w = 0, bias = 0, residual = 0, y = 0;
  Activation act = Activation::None;
};
void launch_gemv(ModuleCache& cache, const GemvArgs& args, StreamHandle stream, int sm_count, GemvConfig config = {});

// ---- uniform random fill in [-scale, scale), deterministic in (seed, index) ----
KernelSource fill_source(DType dtype);
inline constexpr const char* kFillKernelName = "luminal_fill";
void fill_uniform(ModuleCache& cache, DType dtype, DevicePtr out, int64_t count, uint32_t seed, float scale,
                  StreamHandle stream);

// Every variant a build can launch, for ahead-of-time compilation and the NVRTC tests.
std::vector<KernelSource> all_kernel_sources();

}  // namespace luminal::cuda
