#include "luminal_cuda/kernels.hpp"

#include <algorithm>

#include "embedded_kernels.hpp"
#include "luminal/error.hpp"

namespace luminal::cuda {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None: return "none";
    case Activation::Relu: return "relu";
    case Activation::Silu: return "silu";
    case Activation::GeluTanh: return "gelu_tanh";
  }
  return "?";
}

const char* kernel_type_name(DType dtype) {
  LUMINAL_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
                "CUDA kernels take F32, F16 or BF16, not ", dtype_name(dtype));
  return dtype_c_name(dtype).data();
}

namespace {

// common.cuh + one family + its entry lines: one translation unit per variant, so the
// source text (the cache key) names exactly what is compiled.
KernelSource assemble(std::string name, const char* family, const std::string& entries) {
  KernelSource source;
  source.name = std::move(name);
  source.code = std::string(embedded::kCommonCuh) + "\n" + family + "\n" + entries + "\n";
  return source;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int gemv_row_capacity(int M) {
  LUMINAL_CHECK(M >= 1 && M <= kGemvMaxRows, "GEMV takes 1..", kGemvMaxRows, " rows, got ", M);
  int cap = 1;
  while (cap < M) cap *= 2;
  return cap;
}

void launch(api::CUfunction fn, unsigned grid_x, unsigned grid_y, unsigned block, unsigned shared_bytes,
            StreamHandle stream, void** params) {
  LUMINAL_CU(cuLaunchKernel, fn, grid_x, grid_y, 1u, block, 1u, 1u, shared_bytes, stream, params, nullptr);
}

}  // namespace

// ---- GEMV ----

GemvConfig choose_gemv_config(int M, int N, int K, int sm_count) {
  GemvConfig config;
  // Two outputs per warp halve the x loads per weight load once several rows share them.
  config.rows_per_warp = M > 2 && N >= 2 ? 2 : 1;
  // Split K across the warps of a block until there are enough warps to keep every SM's
  // memory pipes busy (about 2 blocks x 8 warps per SM in flight), but never below 4
  // 16-byte loads per lane per warp.
  const int vectors = std::max(1, K / 8);
  const long long warps_wanted = 16LL * std::max(1, sm_count);
  config.ksplit = 1;
  while (config.ksplit < 8 && (static_cast<long long>(N) / config.rows_per_warp) * config.ksplit < warps_wanted &&
         vectors / (config.ksplit * 2) >= 32 * 4)
    config.ksplit *= 2;
  return config;
}

KernelSource gemv_source(DType dtype, int m_max, int rows_per_warp, Activation act) {
  LUMINAL_CHECK(m_max == 1 || m_max == 2 || m_max == 4 || m_max == 8 || m_max == 16,
                "GEMV row capacity must be 1, 2, 4, 8 or 16, got ", m_max);
  LUMINAL_CHECK(rows_per_warp == 1 || rows_per_warp == 2, "GEMV rows per warp must be 1 or 2, got ", rows_per_warp);
  const std::string entry = detail::concat("LUMINAL_GEMV_ENTRY(", kGemvKernelName, ", ", kernel_type_name(dtype), ", ",
                                           m_max, ", ", rows_per_warp, ", ", static_cast<int>(act), ")");
  return assemble(detail::concat("gemv_", lower(dtype_name(dtype)), "_m", m_max, "_r", rows_per_warp, "_",
                                 activation_name(act)),
                  embedded::kGemvCu, entry);
}

void launch_gemv(ModuleCache& cache, const GemvArgs& a, StreamHandle stream, int sm_count, GemvConfig config) {
  LUMINAL_CHECK(a.N > 0 && a.K > 0, "GEMV needs positive N and K, got N=", a.N, " K=", a.K);
  LUMINAL_CHECK(a.x && a.w && a.y, "GEMV needs x, w and y device pointers");
  const int capacity = gemv_row_capacity(a.M);
  const GemvConfig chosen = choose_gemv_config(a.M, a.N, a.K, sm_count);
  if (config.ksplit == 0) config.ksplit = chosen.ksplit;
  if (config.rows_per_warp == 0) config.rows_per_warp = chosen.rows_per_warp;
  LUMINAL_CHECK(config.ksplit == 1 || config.ksplit == 2 || config.ksplit == 4 || config.ksplit == 8,
                "GEMV ksplit must be 1, 2, 4 or 8, got ", config.ksplit);
  const int elements_per_vector = 16 / static_cast<int>(dtype_bytes(a.dtype));
  // 16-byte loads need every row of x and w to start on a 16-byte boundary.
  const int vectorized = a.K % elements_per_vector == 0 && a.x % 16 == 0 && a.w % 16 == 0;
  api::CUfunction fn = cache.function(gemv_source(a.dtype, capacity, config.rows_per_warp, a.act), kGemvKernelName);
  const int rows_per_block = (8 / config.ksplit) * config.rows_per_warp;
  const unsigned blocks = static_cast<unsigned>((a.N + rows_per_block - 1) / rows_per_block);
  DevicePtr x = a.x, w = a.w, bias = a.bias, residual = a.residual, y = a.y;
  int M = a.M, N = a.N, K = a.K, ksplit = config.ksplit;
  void* params[] = {&x, &w, &bias, &residual, &y, &M, &N, &K, &ksplit, const_cast<int*>(&vectorized)};
  launch(fn, blocks, 1, 256, 0, stream, params);
}

// ---- fill ----

KernelSource fill_source(DType dtype) {
  return assemble(detail::concat("fill_", lower(dtype_name(dtype))), embedded::kFillCu,
                  detail::concat("LUMINAL_FILL_ENTRY(", kFillKernelName, ", ", kernel_type_name(dtype), ")"));
}

void fill_uniform(ModuleCache& cache, DType dtype, DevicePtr out, int64_t count, uint32_t seed, float scale,
                  StreamHandle stream) {
  if (count <= 0) return;
  api::CUfunction fn = cache.function(fill_source(dtype), kFillKernelName);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 65535));
  long long n = count;
  void* params[] = {&out, &n, &seed, &scale};
  launch(fn, blocks, 1, 256, 0, stream, params);
}

// ---- every variant ----

std::vector<KernelSource> all_kernel_sources() {
  // Every template parameter value at least once (each dtype with each activation, each
  // row capacity and rows-per-warp in BF16), in one translation unit per dtype so that
  // NVRTC's fixed cost (parsing the fp16/bf16 headers) is paid once per dtype.
  std::vector<KernelSource> sources;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    std::string entries;
    auto add_gemv = [&](int m_max, int rpw, Activation act) {
      entries += detail::concat("LUMINAL_GEMV_ENTRY(luminal_gemv_m", m_max, "_r", rpw, "_", activation_name(act), ", ",
                                kernel_type_name(dt), ", ", m_max, ", ", rpw, ", ", static_cast<int>(act), ")\n");
    };
    for (Activation act : {Activation::None, Activation::Relu, Activation::Silu, Activation::GeluTanh})
      add_gemv(4, 2, act);
    if (dt == DType::BF16)
      for (int m_max : {1, 2, 8, 16})
        for (int rpw : {1, 2}) add_gemv(m_max, rpw, Activation::None);
    sources.push_back(assemble("kernels_" + lower(dtype_name(dt)), embedded::kGemvCu, entries));
    sources.push_back(fill_source(dt));
  }
  return sources;
}

}  // namespace luminal::cuda
