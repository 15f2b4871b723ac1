#include "luminal_cuda/kernels.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string_view>

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
  launch_kernel(fn, grid_x, grid_y, 1u, block, shared_bytes, stream, params);
}

}  // namespace

// ---- GEMV ----

GemvConfig choose_gemv_config(int M, int N, int K, int sm_count) {
  GemvConfig config;
  if (M <= 2 && K >= 2048) {
    // Decode GEMVs of LLM shapes: the best of the 36-config sweep on the H200 (suite_cuda
    // linear cases, 2026-11-30): 2 loads in flight per lane, 2 rows per warp up to 8K
    // outputs and 4 beyond, K split 2 ways for narrow layers, 8 for ~14K outputs and 4 for
    // vocabulary-sized ones (9.7 / 29.3 / 28.8 / 231.8 us against 11.4 / 32.7 / 31.1 /
    // 251.7 us for the generic rule below).
    // Narrower layers (grouped-query attention's k and v projections, 1024 outputs) give
    // too few blocks at 2-way split: 8 ways and 4 loads in flight took 4.18 us against 5.29
    // at 4096 x 1024 (2048 outputs: 4 ways, 6.06 against 6.48; session 8's sweep).
    config.unroll = N <= 1536 ? 4 : 2;
    config.rows_per_warp = N >= 8192 ? 4 : 2;
    config.ksplit = N <= 1536 ? 8 : N <= 3072 ? 4 : N <= 8192 ? 2 : N <= 32768 ? 8 : 4;
    // q, k and v in one launch (6144 outputs) want 4 rows per warp: 13.4 against 17.2 us
    // alone (floor 11.9) in session 13's sweep, 17.4 against 21.2 us in the 8B decode step.
    // (The sweep also preferred 4 loads in flight for the o projection and one row per warp
    // for the down projection; in the model the two then took 23.9 us on average against
    // 22.9, so they keep the rule above.)
    if (N > 4096 && N < 8192) config.rows_per_warp = 4;
    return config;
  }
  // Two outputs per warp halve the x loads per weight load once several rows share them.
  config.rows_per_warp = M > 2 && N >= 2 ? 2 : 1;
  config.unroll = 4;
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

namespace {
// `config` with each field left 0 taken from `chosen`, checked.
GemvConfig completed(GemvConfig config, const GemvConfig& chosen) {
  if (config.ksplit == 0) config.ksplit = chosen.ksplit;
  if (config.rows_per_warp == 0) config.rows_per_warp = chosen.rows_per_warp;
  if (config.unroll == 0) config.unroll = chosen.unroll;
  LUMINAL_CHECK(config.ksplit == 1 || config.ksplit == 2 || config.ksplit == 4 || config.ksplit == 8,
                "GEMV ksplit must be 1, 2, 4 or 8, got ", config.ksplit);
  return config;
}
// The dtype w is read in: `dtype`, or a narrower half type under an F32 product.
DType gemv_weight_dtype(DType dtype, std::optional<DType> weight_dtype) {
  if (!weight_dtype || *weight_dtype == dtype) return dtype;
  LUMINAL_CHECK(dtype == DType::F32 && is_half_float(*weight_dtype),
                "GEMV weights in ", dtype_name(*weight_dtype), " under a ", dtype_name(dtype),
                " product (only F32 with F16 or BF16 weights mix)");
  return *weight_dtype;
}
}  // namespace

namespace {
// The template parameters a GEMV variant (single or grouped) takes, checked; returns the
// dtypes part of its module name ("bf16", "f32_wbf16").
std::string gemv_variant_types(DType dtype, int m_max, int rows_per_warp, int unroll, DType wdt) {
  LUMINAL_CHECK(m_max == 1 || m_max == 2 || m_max == 4 || m_max == 8 || m_max == 16,
                "GEMV row capacity must be 1, 2, 4, 8 or 16, got ", m_max);
  LUMINAL_CHECK(rows_per_warp == 1 || rows_per_warp == 2 || rows_per_warp == 4, "GEMV rows per warp must be 1, 2 or 4, got ",
                rows_per_warp);
  LUMINAL_CHECK(unroll == 2 || unroll == 4 || unroll == 8, "GEMV unroll must be 2, 4 or 8, got ", unroll);
  return wdt == dtype ? lower(dtype_name(dtype)) : lower(dtype_name(dtype)) + "_w" + lower(dtype_name(wdt));
}

// gemv.cu; LUMINAL_GEMV_PREFETCH_MB=n caps its weight prefetch at n MiB (0: none) instead
// of the default, to measure the prefetch in one run (the source, so the cache key, differs).
const char* gemv_family() {
  static const std::string family = [] {
    std::string prefix;
    if (const char* env = std::getenv("LUMINAL_GEMV_PREFETCH_MB")) {
      char* end = nullptr;
      const long mb = std::strtol(env, &end, 10);
      LUMINAL_CHECK(end != env && *end == '\0' && mb >= 0 && mb <= 1024,
                    "LUMINAL_GEMV_PREFETCH_MB must be a number of MiB from 0 to 1024, got '", env, "'");
      prefix = detail::concat("#define LK_GEMV_PREFETCH_MB ", mb, "\n");
    }
    return prefix + embedded::kGemvCu;
  }();
  return family.c_str();
}
}  // namespace

KernelSource gemv_source(DType dtype, int m_max, int rows_per_warp, Activation act, int unroll,
                         std::optional<DType> weight_dtype) {
  const DType wdt = gemv_weight_dtype(dtype, weight_dtype);
  const std::string types = gemv_variant_types(dtype, m_max, rows_per_warp, unroll, wdt);
  const std::string entry =
      detail::concat("LUMINAL_GEMV_ENTRY(", kGemvKernelName, ", ", kernel_type_name(dtype), ", ", kernel_type_name(wdt),
                     ", ", m_max, ", ", rows_per_warp, ", ", static_cast<int>(act), ", ", unroll, ")");
  return assemble(detail::concat("gemv_", types, "_m", m_max, "_r", rows_per_warp, "_u", unroll, "_",
                                 activation_name(act)),
                  gemv_family(), entry);
}

void launch_gemv(ModuleCache& cache, const GemvArgs& a, StreamHandle stream, int sm_count, GemvConfig config) {
  LUMINAL_CHECK(a.N > 0 && a.K > 0, "GEMV needs positive N and K, got N=", a.N, " K=", a.K);
  LUMINAL_CHECK(a.x && a.w && a.y, "GEMV needs x, w and y device pointers");
  const int capacity = gemv_row_capacity(a.M);
  const GemvConfig chosen = choose_gemv_config(a.M, a.N, a.K, sm_count);
  config = completed(config, chosen);
  // A vector is one 16-byte load of w (x, if wider, is read as several).
  const int elements_per_vector = 16 / static_cast<int>(dtype_bytes(gemv_weight_dtype(a.dtype, a.weight_dtype)));
  // 16-byte loads need every row of x and w to start on a 16-byte boundary.
  int vectorized = a.K % elements_per_vector == 0 && a.x % 16 == 0 && a.w % 16 == 0;
  api::CUfunction fn = cache.function(
      gemv_source(a.dtype, capacity, config.rows_per_warp, a.act, config.unroll, a.weight_dtype), kGemvKernelName);
  const int rows_per_block = (8 / config.ksplit) * config.rows_per_warp;
  const unsigned blocks = static_cast<unsigned>((a.N + rows_per_block - 1) / rows_per_block);
  DevicePtr x = a.x, w = a.w, bias = a.bias, residual = a.residual, y = a.y, next = a.next;
  int M = a.M, N = a.N, K = a.K, ksplit = config.ksplit;
  long long next_bytes = next % 16 == 0 ? a.next_bytes : 0;
  void* params[] = {&x, &w, &bias, &residual, &y, &M, &N, &K, &ksplit, &vectorized, &next, &next_bytes};
  launch(fn, blocks, 1, 256, 0, stream, params);
}

KernelSource gemv_group_source(DType dtype, int m_max, int rows_per_warp, int unroll,
                               std::optional<DType> weight_dtype) {
  const DType wdt = gemv_weight_dtype(dtype, weight_dtype);
  const std::string types = gemv_variant_types(dtype, m_max, rows_per_warp, unroll, wdt);
  const std::string entry =
      detail::concat("LUMINAL_GEMV_GROUP_ENTRY(", kGemvGroupKernelName, ", ", kernel_type_name(dtype), ", ",
                     kernel_type_name(wdt), ", ", m_max, ", ", rows_per_warp, ", ", unroll, ")");
  return assemble(detail::concat("gemv_group_", types, "_m", m_max, "_r", rows_per_warp, "_u", unroll),
                  gemv_family(), entry);
}

GemvConfig gemv_group_config(const GemvGroupArgs& a, int sm_count) {
  int total = 0;
  for (int p = 0; p < a.count; ++p) total += a.N[p];
  return choose_gemv_config(a.M, total, a.K, sm_count);
}

void launch_gemv_group(ModuleCache& cache, const GemvGroupArgs& a, StreamHandle stream, int sm_count,
                       GemvConfig config) {
  LUMINAL_CHECK(a.count >= 1 && a.count <= kGemvGroupMax, "GEMV group of ", a.count, " (1..", kGemvGroupMax, ")");
  LUMINAL_CHECK(a.K > 0 && a.x, "GEMV group needs a positive K and x");
  const int capacity = gemv_row_capacity(a.M);
  const GemvConfig chosen = gemv_group_config(a, sm_count);
  config = completed(config, chosen);
  const int elements_per_vector = 16 / static_cast<int>(dtype_bytes(gemv_weight_dtype(a.dtype, a.weight_dtype)));
  int vectorized = a.K % elements_per_vector == 0 && a.x % 16 == 0;
  DevicePtr w[kGemvGroupMax] = {}, y[kGemvGroupMax] = {};
  int n[kGemvGroupMax] = {};
  const int rows_per_block = (8 / config.ksplit) * config.rows_per_warp;
  long long blocks = 0;
  for (int p = 0; p < a.count; ++p) {
    LUMINAL_CHECK(a.N[p] > 0 && a.w[p] && a.y[p], "GEMV group member ", p, " needs N > 0 and w, y pointers");
    vectorized = vectorized && a.w[p] % 16 == 0;
    w[p] = a.w[p];
    y[p] = a.y[p];
    n[p] = a.N[p];
    blocks += (a.N[p] + rows_per_block - 1) / rows_per_block;
  }
  LUMINAL_CHECK(blocks <= std::numeric_limits<int32_t>::max(), "GEMV group needs ", blocks, " blocks");
  api::CUfunction fn = cache.function(
      gemv_group_source(a.dtype, capacity, config.rows_per_warp, config.unroll, a.weight_dtype), kGemvGroupKernelName);
  DevicePtr x = a.x, next = a.next;
  int M = a.M, K = a.K, ksplit = config.ksplit;
  long long next_bytes = next % 16 == 0 ? a.next_bytes : 0;
  void* params[] = {&x, &w[0], &w[1], &w[2], &w[3], &y[0], &y[1], &y[2], &y[3], &n[0], &n[1], &n[2], &n[3],
                    &M, &K, &ksplit, &vectorized, &next, &next_bytes};
  launch(fn, static_cast<unsigned>(blocks), 1, 256, 0, stream, params);
}

// ---- rows ----

KernelSource rows_source(DType dtype) {
  const char* t = kernel_type_name(dtype);
  return assemble(detail::concat("rows_", lower(dtype_name(dtype))), embedded::kRowsCu,
                  detail::concat("LUMINAL_RMSNORM_ENTRY(", kRmsNormKernelName, ", ", t, ")\n",
                                 "LUMINAL_SOFTMAX_ENTRY(", kSoftmaxKernelName, ", ", t, ")\n",
                                 "LUMINAL_ROWS_CACHED_ENTRIES(", kRmsNormKernelName, ", ", kSoftmaxKernelName, ", ", t,
                                 ", 1)\n", "LUMINAL_ROWS_CACHED_ENTRIES(", kRmsNormKernelName, ", ", kSoftmaxKernelName,
                                 ", ", t, ", 2)\n", "LUMINAL_ROWS_CACHED_ENTRIES(", kRmsNormKernelName, ", ",
                                 kSoftmaxKernelName, ", ", t, ", 4)\n", "LUMINAL_ROWS_CACHED_ENTRIES(",
                                 kRmsNormKernelName, ", ", kSoftmaxKernelName, ", ", t, ", 8)"));
}

namespace {
// Threads per row: enough for one 16-byte vector each up to 256 (a row is a few KB).
unsigned row_threads(int cols, int per_vector) {
  const int vectors = (cols + per_vector - 1) / per_vector;
  return static_cast<unsigned>(std::clamp((vectors + 31) / 32 * 32, 32, 256));
}
int row_vectorized(DType dtype, int cols, std::initializer_list<DevicePtr> ptrs) {
  const int per_vector = 16 / static_cast<int>(dtype_bytes(dtype));
  if (cols % per_vector) return 0;
  for (DevicePtr p : ptrs)
    if (p % 16) return 0;
  return 1;
}
// The register-cached launch for a vectorised row: the fewest vectors per thread (1, 2,
// 4, 8) that fit the row in 1024 threads while giving each block at least ~128 threads'
// worth of 16-byte loads in flight; nullopt when the row is too long (streaming kernel).
struct CachedRows {
  int vpt;
  unsigned threads;
};
std::optional<CachedRows> cached_rows(DType dtype, int cols) {
  const int vectors = cols / (16 / static_cast<int>(dtype_bytes(dtype)));
  for (int vpt : {1, 2, 4, 8}) {
    const int threads = (vectors + vpt - 1) / vpt;
    if (threads <= 256 || (vpt == 8 && threads <= 1024))
      return CachedRows{vpt, static_cast<unsigned>(std::max(32, (threads + 31) / 32 * 32))};
  }
  return std::nullopt;
}
}  // namespace

void launch_rmsnorm(ModuleCache& cache, DType dtype, DevicePtr x, DevicePtr weight, DevicePtr y, int rows, int cols,
                    float eps, StreamHandle stream) {
  LUMINAL_CHECK(rows >= 0 && cols > 0, "RMSNorm needs positive cols, got rows=", rows, " cols=", cols);
  if (rows == 0) return;
  api::CUfunction fn = cache.function(rows_source(dtype), kRmsNormKernelName);
  int vectorized = row_vectorized(dtype, cols, {x, y, weight});
  if (auto c = vectorized ? cached_rows(dtype, cols) : std::nullopt) {
    api::CUfunction cached =
        cache.function(rows_source(dtype), detail::concat(kRmsNormKernelName, "_c", c->vpt));
    void* params[] = {&x, &weight, &y, &cols, &eps};
    launch(cached, static_cast<unsigned>(rows), 1, c->threads, 0, stream, params);
    return;
  }
  void* params[] = {&x, &weight, &y, &cols, &eps, &vectorized};
  launch(fn, static_cast<unsigned>(rows), 1, row_threads(cols, 16 / static_cast<int>(dtype_bytes(dtype))), 0, stream,
         params);
}

void launch_softmax(ModuleCache& cache, DType dtype, DevicePtr x, DevicePtr y, int rows, int cols, StreamHandle stream) {
  LUMINAL_CHECK(rows >= 0 && cols > 0, "softmax needs positive cols, got rows=", rows, " cols=", cols);
  if (rows == 0) return;
  api::CUfunction fn = cache.function(rows_source(dtype), kSoftmaxKernelName);
  int vectorized = row_vectorized(dtype, cols, {x, y});
  if (auto c = vectorized ? cached_rows(dtype, cols) : std::nullopt) {
    api::CUfunction cached =
        cache.function(rows_source(dtype), detail::concat(kSoftmaxKernelName, "_c", c->vpt));
    void* params[] = {&x, &y, &cols};
    launch(cached, static_cast<unsigned>(rows), 1, c->threads, 0, stream, params);
    return;
  }
  void* params[] = {&x, &y, &cols, &vectorized};
  launch(fn, static_cast<unsigned>(rows), 1, row_threads(cols, 16 / static_cast<int>(dtype_bytes(dtype))), 0, stream,
         params);
}

// ---- KV cache ----

KvCacheLayout KvCacheLayout::packed() const {
  KvCacheLayout l = *this;
  if (!l.stride_p) l.stride_p = l.head_dim;
  if (!l.stride_h) l.stride_h = int64_t(l.capacity) * l.stride_p;
  if (!l.stride_b) l.stride_b = int64_t(l.kv_heads) * l.stride_h;
  return l;
}

namespace {
void check_cache(const KvCacheLayout& l) {
  LUMINAL_CHECK(l.batch > 0 && l.kv_heads > 0 && l.capacity > 0 && l.head_dim > 0, "KV cache needs positive sizes, got batch=",
                l.batch, " kv_heads=", l.kv_heads, " capacity=", l.capacity, " head_dim=", l.head_dim);
}
constexpr int kAttentionWarps = 4;
}  // namespace

KernelSource attention_source(DType dtype, int head_dim, int group) {
  LUMINAL_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "decode attention takes head_dim 64, 128 or 256, got ",
                head_dim);
  LUMINAL_CHECK(group == 1 || group == 2 || group == 4 || group == 8,
                "decode attention takes 1, 2, 4 or 8 query heads per kv head, got ", group);
  return assemble(detail::concat("attention_", lower(dtype_name(dtype)), "_d", head_dim, "_g", group),
                  embedded::kAttentionCu,
                  detail::concat("LUMINAL_ATTENTION_ENTRY(", kAttentionPartialKernelName, ", ",
                                 kAttentionCombineKernelName, ", ", kernel_type_name(dtype), ", ", head_dim, ", ", group,
                                 ")"));
}

size_t decode_attention_workspace_bytes(const DecodeAttentionArgs& a, int splits) {
  return size_t(a.cache.batch) * a.q_heads * splits * (a.cache.head_dim + 2) * sizeof(float);
}

int choose_attention_splits(const DecodeAttentionArgs& a, int sm_count) {
  // About two blocks per SM, but at least 32 positions per chunk (one per warp-step).
  const int blocks = std::max(1, a.cache.batch * a.cache.kv_heads);
  const int wanted = std::max(1, (2 * std::max(1, sm_count) + blocks - 1) / blocks);
  const int most = std::max(1, (std::max(1, a.seq_len) + 31) / 32);
  return std::min(wanted, most);
}

void launch_decode_attention(ModuleCache& cache, const DecodeAttentionArgs& a, DevicePtr workspace,
                             size_t workspace_bytes, int splits, StreamHandle stream) {
  check_cache(a.cache);
  const KvCacheLayout l = a.cache.packed();
  LUMINAL_CHECK(a.q_heads > 0 && a.q_heads % l.kv_heads == 0, "decode attention: ", a.q_heads,
                " query heads are not a multiple of ", l.kv_heads, " kv heads");
  LUMINAL_CHECK(a.seq_len >= 0 && a.seq_len <= l.capacity, "decode attention: length ", a.seq_len,
                " outside the cache capacity ", l.capacity);
  LUMINAL_CHECK(splits >= 1, "decode attention needs at least one split");
  LUMINAL_CHECK(workspace_bytes >= decode_attention_workspace_bytes(a, splits), "decode attention workspace of ",
                workspace_bytes, " bytes is below the ", decode_attention_workspace_bytes(a, splits), " needed");
  LUMINAL_CHECK(a.q && a.k && a.v && a.out && workspace, "decode attention needs q, k, v, out and workspace pointers");
  const int group = a.q_heads / l.kv_heads;
  const KernelSource source = attention_source(a.dtype, l.head_dim, group);
  api::CUfunction partial = cache.function(source, kAttentionPartialKernelName);
  api::CUfunction combine = cache.function(source, kAttentionCombineKernelName);
  DevicePtr q = a.q, k = a.k, v = a.v, out = a.out, seq_ptr = a.seq_len_ptr;
  DevicePtr partial_o = workspace;
  DevicePtr partial_stats = workspace + size_t(l.batch) * a.q_heads * splits * l.head_dim * sizeof(float);
  int kv_heads = l.kv_heads, seq_len = a.seq_len, q_heads = a.q_heads, n_splits = splits;
  // Chunks cover the bound (seq_len) so a device-side length up to it is fully served.
  int chunk = (std::max(1, a.seq_len) + splits - 1) / splits;
  long long sb = l.stride_b, sh = l.stride_h, sp = l.stride_p;
  float scale = a.scale != 0 ? a.scale : 1.0f / std::sqrt(static_cast<float>(l.head_dim));
  void* partial_params[] = {&q, &k, &v, &partial_o, &partial_stats, &kv_heads, &seq_len, &seq_ptr, &chunk, &sb, &sh, &sp,
                            &scale};
  launch_kernel(partial, static_cast<unsigned>(l.kv_heads), static_cast<unsigned>(splits),
                static_cast<unsigned>(l.batch), static_cast<unsigned>(kAttentionWarps * 32), 0u, stream, partial_params);
  void* combine_params[] = {&partial_o, &partial_stats, &out, &q_heads, &n_splits};
  launch_kernel(combine, static_cast<unsigned>(a.q_heads), static_cast<unsigned>(l.batch), 1u,
                static_cast<unsigned>(l.head_dim), 0u, stream, combine_params);
}

KernelSource kv_scatter_source(DType dtype) {
  return assemble(detail::concat("kv_scatter_", lower(dtype_name(dtype))), embedded::kKvScatterCu,
                  detail::concat("LUMINAL_KV_SCATTER_ENTRY(", kKvScatterKernelName, ", ", kernel_type_name(dtype), ")"));
}

void launch_kv_scatter(ModuleCache& cache, DType dtype, const KvCacheLayout& layout, DevicePtr k_new, DevicePtr v_new,
                       int new_len, DevicePtr k_cache, DevicePtr v_cache, int start, DevicePtr start_ptr,
                       StreamHandle stream) {
  check_cache(layout);
  LUMINAL_CHECK(new_len >= 0, "KV scatter: negative row count ", new_len);
  if (new_len == 0) return;
  LUMINAL_CHECK(k_new && v_new && k_cache && v_cache, "KV scatter needs source and cache pointers");
  const KvCacheLayout l = layout.packed();
  api::CUfunction fn = cache.function(kv_scatter_source(dtype), kKvScatterKernelName);
  const int per_vector = 16 / static_cast<int>(dtype_bytes(dtype));
  const int64_t elem = static_cast<int64_t>(dtype_bytes(dtype));
  int vectorized = l.head_dim % per_vector == 0 && k_new % 16 == 0 && v_new % 16 == 0 && k_cache % 16 == 0 &&
                   v_cache % 16 == 0 && (l.stride_b * elem) % 16 == 0 && (l.stride_h * elem) % 16 == 0 &&
                   (l.stride_p * elem) % 16 == 0;
  const int64_t work = int64_t(l.kv_heads) * new_len * (l.head_dim / (vectorized ? per_vector : 1));
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((work + 255) / 256, 1, 4096));
  int kv_heads = l.kv_heads, head_dim = l.head_dim, capacity = l.capacity;
  long long sb = l.stride_b, sh = l.stride_h, sp = l.stride_p;
  void* params[] = {&k_new, &v_new, &k_cache, &v_cache, &kv_heads, &new_len, &head_dim, &start, &start_ptr, &capacity,
                    &sb, &sh, &sp, &vectorized};
  launch_kernel(fn, blocks, static_cast<unsigned>(l.batch), 1u, 256u, 0u, stream, params);
}

// ---- small matmul ----

KernelSource small_matmul_source(DType dtype) {
  LUMINAL_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
                "small matmul takes F32, F16 or BF16, got ", dtype_name(dtype));
  return assemble(detail::concat("small_matmul_", lower(dtype_name(dtype))), embedded::kSmallMatmulCu,
                  detail::concat("LUMINAL_SMALL_MATMUL_ENTRY(", kSmallMatmulKernelName, ", ", kernel_type_name(dtype),
                                 ")"));
}

int attention_rows_split(int cc_major) {
  static const int from_env = [] {
    const char* env = std::getenv("LUMINAL_CUDA_ATTENTION_SPLIT");
    if (!env || !*env) return 0;
    const std::string_view v(env);
    LUMINAL_CHECK(v == "1" || v == "2" || v == "4" || v == "8",
                  "LUMINAL_CUDA_ATTENTION_SPLIT must be 1, 2, 4 or 8 (blocks per attention row), got '", env, "'");
    return v[0] - '0';
  }();
  if (cc_major < 9) return 1;  // clusters need sm_90
  return from_env ? from_env : 8;
}

KernelSource attention_rows_source(DType dtype, int split) {
  LUMINAL_CHECK(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
                "attention rows take F32, F16 or BF16, got ", dtype_name(dtype));
  LUMINAL_CHECK(split >= 1 && split <= 8, "attention rows: a cluster of ", split, " blocks (1 to 8)");
  const std::string entry =
      split == 1 ? detail::concat("LUMINAL_ATTENTION_ROWS_ENTRY(", kAttentionRowsKernelName, ", ", kernel_type_name(dtype), ")")
                 : detail::concat("LUMINAL_ATTENTION_ROWS_CLUSTER_ENTRY(", kAttentionRowsKernelName, ", ",
                                  kernel_type_name(dtype), ", ", split, ")");
  return assemble(detail::concat("attention_rows_", lower(dtype_name(dtype)), "_s", split), embedded::kAttentionRowsCu, entry);
}

KernelSource attention_flash_source(DType dtype, int depth) {
  LUMINAL_CHECK(dtype == DType::F16 || dtype == DType::BF16, "flash attention takes F16 or BF16, got ",
                dtype_name(dtype));
  LUMINAL_CHECK(attention_flash_depth(depth), "flash attention takes depth 64 or 128, got ", depth);
  return assemble(detail::concat("attention_flash_", lower(dtype_name(dtype)), "_d", depth), embedded::kAttentionFlashCu,
                  detail::concat("LUMINAL_ATTENTION_FLASH_ENTRY(", kAttentionFlashKernelName, ", ",
                                 kernel_type_name(dtype), ", ", depth, ")"));
}

// ---- fill ----

KernelSource fill_source(DType dtype) {
  return assemble(detail::concat("fill_", lower(dtype_name(dtype))), embedded::kFillCu,
                  detail::concat("LUMINAL_FILL_ENTRY(", kFillKernelName, ", ", kernel_type_name(dtype), ")"));
}

void fill_uniform(ModuleCache& cache, DType dtype, DevicePtr out, int64_t count, uint32_t seed, float scale,
                  StreamHandle stream, FillSpecials specials) {
  if (count <= 0) return;
  api::CUfunction fn = cache.function(fill_source(dtype), kFillKernelName);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 65535));
  long long n = count;
  int special = static_cast<int>(specials);
  void* params[] = {&out, &n, &seed, &scale, &special};
  launch(fn, blocks, 1, 256, 0, stream, params);
}

KernelSource hold_source() { return assemble("hold", embedded::kFillCu, "LUMINAL_HOLD_ENTRY(luminal_hold)"); }

void hold_stream(ModuleCache& cache, int64_t nanoseconds, StreamHandle stream) {
  api::CUfunction fn = cache.function(hold_source(), kHoldKernelName);
  long long ns = nanoseconds;
  void* params[] = {&ns};
  launch(fn, 1, 1, 1, 0, stream, params);
}

// ---- every variant ----

std::vector<KernelSource> all_kernel_sources() {
  // Every template parameter value at least once: each dtype with each activation, and in
  // BF16 each GEMV row capacity and rows-per-warp and each attention head dim and group.
  // The GEMV variants share one translation unit per dtype, so that NVRTC's fixed cost
  // (parsing the fp16/bf16 headers) is paid once for them.
  std::vector<KernelSource> sources;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    std::string entries;
    auto add_gemv = [&](int m_max, int rpw, Activation act, int unroll, DType wdt) {
      entries += detail::concat("LUMINAL_GEMV_ENTRY(luminal_gemv_m", m_max, "_r", rpw, "_u", unroll, "_",
                                activation_name(act), "_w", lower(dtype_name(wdt)), ", ", kernel_type_name(dt), ", ",
                                kernel_type_name(wdt), ", ", m_max, ", ", rpw, ", ", static_cast<int>(act), ", ", unroll,
                                ")\n");
    };
    for (Activation act : {Activation::None, Activation::Relu, Activation::Silu, Activation::GeluTanh})
      add_gemv(4, 2, act, 4, dt);
    if (dt == DType::BF16) {
      for (int m_max : {1, 2, 8, 16})
        for (int rpw : {1, 2}) add_gemv(m_max, rpw, Activation::None, 4, dt);
      add_gemv(1, 1, Activation::None, 2, dt);
      add_gemv(16, 2, Activation::None, 8, dt);
      add_gemv(16, 4, Activation::None, 2, dt);
    }
    if (dt == DType::F32)  // F32 products over half-precision weights
      for (DType wdt : {DType::F16, DType::BF16}) {
        add_gemv(1, 2, Activation::None, 2, wdt);
        add_gemv(16, 2, Activation::None, 4, wdt);
      }
    entries += detail::concat("LUMINAL_GEMV_GROUP_ENTRY(luminal_gemv_group_", lower(dtype_name(dt)), ", ",
                              kernel_type_name(dt), ", ", kernel_type_name(dt), ", 1, 2, 2)\n");
    sources.push_back(assemble("kernels_" + lower(dtype_name(dt)), embedded::kGemvCu, entries));
    sources.push_back(fill_source(dt));
    sources.push_back(small_matmul_source(dt));
    for (int split : {1, attention_rows_split(9)}) sources.push_back(attention_rows_source(dt, split));
    if (dt != DType::F32)
      for (int depth : {64, 128}) sources.push_back(attention_flash_source(dt, depth));
    sources.push_back(rows_source(dt));
    sources.push_back(kv_scatter_source(dt));
    if (dt == DType::BF16) {
      for (auto [head_dim, group] : {std::pair{64, 1}, {128, 2}, {256, 4}, {128, 8}})
        sources.push_back(attention_source(dt, head_dim, group));
    } else {
      sources.push_back(attention_source(dt, 128, 4));
    }
  }
  sources.push_back(hold_source());
  return sources;
}

}  // namespace luminal::cuda
