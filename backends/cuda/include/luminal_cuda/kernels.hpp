// Our own CUDA kernels: CUDA C sources (backends/cuda/kernels/*.cu, embedded at build
// time) compiled by NVRTC, one templated body per family and one extern "C" entry per
// variant, plus host launchers that choose grid and block from the shape.
#pragma once

#include <optional>
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
// all contiguous and of one dtype, except that an F32 product may read F16 or BF16 weights
// (`weight_dtype`), widened in registers; bias and residual may be 0 (absent).
inline constexpr int kGemvMaxRows = 16;
struct GemvConfig {
  int ksplit = 0;         // warps of a block that split K: 1, 2, 4 or 8 (0: choose)
  int rows_per_warp = 0;  // output columns per warp: 1, 2 or 4 (0: choose); more rows share each x load
  int unroll = 0;         // 16-byte weight loads in flight per lane: 2, 4 or 8 (0: choose)
};
GemvConfig choose_gemv_config(int M, int N, int K, int sm_count);
// The source of one variant; `m_max` is the row capacity (1, 2, 4, 8 or 16).
// `weight_dtype`: w's dtype when it differs from `dtype` (F32 with F16/BF16 weights only).
KernelSource gemv_source(DType dtype, int m_max, int rows_per_warp, Activation act, int unroll = 4,
                         std::optional<DType> weight_dtype = std::nullopt);
inline constexpr const char* kGemvKernelName = "luminal_gemv";

struct GemvArgs {
  DType dtype = DType::BF16;
  std::optional<DType> weight_dtype;  // w's dtype when not `dtype`
  int M = 1, N = 0, K = 0;
  DevicePtr x = 0, w = 0, bias = 0, residual = 0, y = 0;
  Activation act = Activation::None;
  // Bytes from `next` (16-byte aligned; 0: none) the blocks ask the L2 for as they finish:
  // the weights of the GEMV that follows, streamed while the kernels between run.
  DevicePtr next = 0;
  int64_t next_bytes = 0;
};
void launch_gemv(ModuleCache& cache, const GemvArgs& args, StreamHandle stream, int sm_count, GemvConfig config = {});

// Up to kGemvGroupMax GEMVs that share x (and M, K and the dtypes) in one launch, each
// y_p = x . w_p^T with its own N_p: a block streams rows of one member's weight. The config
// is the one choose_gemv_config gives the members' total N. No bias, residual or activation.
inline constexpr int kGemvGroupMax = 4;
struct GemvGroupArgs {
  DType dtype = DType::BF16;
  std::optional<DType> weight_dtype;
  int M = 1, K = 0, count = 0;
  DevicePtr x = 0;
  DevicePtr w[kGemvGroupMax] = {}, y[kGemvGroupMax] = {};
  int N[kGemvGroupMax] = {};
  DevicePtr next = 0;  // as GemvArgs::next
  int64_t next_bytes = 0;
};
KernelSource gemv_group_source(DType dtype, int m_max, int rows_per_warp, int unroll,
                               std::optional<DType> weight_dtype = std::nullopt);
inline constexpr const char* kGemvGroupKernelName = "luminal_gemv_group";
GemvConfig gemv_group_config(const GemvGroupArgs& args, int sm_count);
void launch_gemv_group(ModuleCache& cache, const GemvGroupArgs& args, StreamHandle stream, int sm_count,
                       GemvConfig config = {});

// ---- row-wise RMSNorm and softmax over a contiguous [rows, cols] matrix ----
//   rmsnorm: y = x * rsqrt(mean(x^2) + eps) * weight   (weight [cols], may be 0)
//   softmax: y = exp(x - max) / sum(exp(x - max))      (online statistics, one pass)
KernelSource rows_source(DType dtype);
inline constexpr const char* kRmsNormKernelName = "luminal_rmsnorm";
inline constexpr const char* kSoftmaxKernelName = "luminal_softmax";
void launch_rmsnorm(ModuleCache& cache, DType dtype, DevicePtr x, DevicePtr weight, DevicePtr y, int rows, int cols,
                    float eps, StreamHandle stream);
void launch_softmax(ModuleCache& cache, DType dtype, DevicePtr x, DevicePtr y, int rows, int cols, StreamHandle stream);

// ---- KV cache: element (b, h, p, d) at b*stride_b + h*stride_h + p*stride_p + d ----
struct KvCacheLayout {
  int batch = 1, kv_heads = 0, capacity = 0, head_dim = 0;
  int64_t stride_b = 0, stride_h = 0, stride_p = 0;  // 0: packed [batch, kv_heads, capacity, head_dim]
  KvCacheLayout packed() const;                      // the strides filled in
};

// Decode attention (flash-decoding, grouped-query): one query token per sequence.
//   q, out [batch, q_heads, head_dim]; q_heads = kv_heads * group, group in {1, 2, 4, 8},
//   head_dim in {64, 128, 256}. The length is `seq_len`, or read on the device from
//   `seq_len_ptr` (an int) when set, with `seq_len` then an upper bound used for the grid.
KernelSource attention_source(DType dtype, int head_dim, int group);
inline constexpr const char* kAttentionPartialKernelName = "luminal_attention_partial";
inline constexpr const char* kAttentionCombineKernelName = "luminal_attention_combine";
struct DecodeAttentionArgs {
  DType dtype = DType::BF16;
  KvCacheLayout cache;
  int q_heads = 0;
  int seq_len = 0;
  DevicePtr seq_len_ptr = 0;
  DevicePtr q = 0, k = 0, v = 0, out = 0;
  float scale = 0;  // 0: 1 / sqrt(head_dim)
};
// Bytes of fp32 workspace the launcher needs for `splits` chunks.
size_t decode_attention_workspace_bytes(const DecodeAttentionArgs& args, int splits);
int choose_attention_splits(const DecodeAttentionArgs& args, int sm_count);
void launch_decode_attention(ModuleCache& cache, const DecodeAttentionArgs& args, DevicePtr workspace,
                             size_t workspace_bytes, int splits, StreamHandle stream);

// In-place scatter of new K/V rows ([batch, kv_heads, new_len, head_dim], contiguous) into
// the caches at positions start.. (from `start_ptr` on the device when set). Positions at
// or past the capacity are dropped, never written out of bounds.
KernelSource kv_scatter_source(DType dtype);
inline constexpr const char* kKvScatterKernelName = "luminal_kv_scatter";
void launch_kv_scatter(ModuleCache& cache, DType dtype, const KvCacheLayout& layout, DevicePtr k_new, DevicePtr v_new,
                       int new_len, DevicePtr k_cache, DevicePtr v_cache, int start, DevicePtr start_ptr,
                       StreamHandle stream);

// ---- uniform random fill in [-scale, scale), deterministic in (seed, index) ----
// With specials, one element in 8 is a special value instead (luminal::InputValues's list:
// +-0, +-inf, NaN, +-1e-40, +-1, and with All also 65504 and -3e38).
enum class FillSpecials : int { None = 0, All = 1, NoLargeMagnitudes = 2 };
KernelSource fill_source(DType dtype);
inline constexpr const char* kFillKernelName = "luminal_fill";
void fill_uniform(ModuleCache& cache, DType dtype, DevicePtr out, int64_t count, uint32_t seed, float scale,
                  StreamHandle stream, FillSpecials specials = FillSpecials::None);

// One thread that holds `stream` for `nanoseconds` (the op profile's batches, see fill.cu).
KernelSource hold_source();
inline constexpr const char* kHoldKernelName = "luminal_hold";
void hold_stream(ModuleCache& cache, int64_t nanoseconds, StreamHandle stream);

// ---- small batched matmul, sizes and strides read from device memory ----
// C[b, i, j] = sum_k A[b, i, k] B[b, k, j] (kernels/small_matmul.cu): the runtime's choice
// for a matmul whose n or k changes from run to run (decode attention over a growing
// cache) and whose m is at most kSmallMatmulMaxRows, so that its launch, and the graph
// holding it, stay the same while the sizes change. Launch: kSmallMatmulThreads threads,
// at least batch * m * ceil(n / 32) blocks; arguments (a, b, c, params), params pointing to
// kSmallMatmulParams int64s in device memory: m, n, k, batch, then A's offset, row (m)
// stride, column (k) stride, batch stride, then B's offset, row (k), column (n) and batch
// strides, in elements.
KernelSource small_matmul_source(DType dtype);
inline constexpr const char* kSmallMatmulKernelName = "luminal_small_matmul";
inline constexpr int kSmallMatmulParams = 12;
inline constexpr unsigned kSmallMatmulThreads = 256;
inline constexpr int64_t kSmallMatmulMaxRows = 16;

// Attention rows (kernels/attention_rows.cu), the CudaAttention op: q . k^T rounded, times a
// scale, plus a mask, softmax over the keys, times v, a cluster of `split` blocks per
// (batch, row) (split > 1 needs sm_90: thread-block clusters), sizes and strides from
// kAttentionRowsParams int64s in device memory (the layout is in the file). Launch:
// kAttentionRowsThreads threads, split * batch * rows blocks or more. F32, F16 or BF16;
// depth and width up to kAttentionRowsMaxDepth.
KernelSource attention_rows_source(DType dtype, int split);
// The split for a device of compute capability `cc_major`: 8 on sm_90 and later, 1 before;
// LUMINAL_CUDA_ATTENTION_SPLIT=1, 2, 4 or 8 sets it on sm_90 (to measure it in a model).
int attention_rows_split(int cc_major);
inline constexpr const char* kAttentionRowsKernelName = "luminal_attention_rows";
inline constexpr int kAttentionRowsParams = 29;
inline constexpr unsigned kAttentionRowsThreads = 256;
inline constexpr int64_t kAttentionRowsMaxDepth = 256;

// Attention over many rows on tensor cores (kernels/attention_flash.cu): the CudaAttention
// op's contract and params (kAttentionRowsParams) with mma.sync, 64 rows of one batch per
// block of kAttentionFlashThreads threads, batch * ceil(rows / 64) blocks or more. F16 or
// BF16, depth = width = 64 or 128, q, k and v contiguous along the depth (and v along the
// width), offsets and row strides multiples of 8 elements; sm_80 and later.
KernelSource attention_flash_source(DType dtype, int depth);
inline constexpr const char* kAttentionFlashKernelName = "luminal_attention_flash";
inline constexpr unsigned kAttentionFlashThreads = 128;
inline constexpr int64_t kAttentionFlashRows = 64;
inline constexpr bool attention_flash_depth(int64_t depth) { return depth == 64 || depth == 128; }

// Every variant a build can launch, for ahead-of-time compilation and the NVRTC tests.
std::vector<KernelSource> all_kernel_sources();

}  // namespace luminal::cuda
