// Decode attention (split-K over the sequence, grouped-query heads) against a double CPU
// reference, on the GPU; also the device-side length used inside CUDA graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "luminal_cuda/kernels.hpp"
#include "test_util.hpp"

using namespace luminal::cuda;
using namespace luminal::cuda::test_util;
using luminal::DType;

namespace {
class DecodeAttention : public ::testing::Test {
 protected:
  void SetUp() override { LUMINAL_REQUIRE_GPU(); }
};

struct Case {
  DType dtype;
  int batch, kv_heads, group, head_dim, capacity, seq_len;
  int splits = 0;               // 0: the launcher's choice
  int device_len = -1;          // >= 0: the length read from device memory (seq_len is the bound)
  int64_t stride_p = 0;         // 0: packed
};

void run(Context& ctx, Stream& stream, ModuleCache& cache, const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << luminal::dtype_name(c.dtype) << " b=" << c.batch << " kvh=" << c.kv_heads
                                    << " g=" << c.group << " d=" << c.head_dim << " len=" << c.seq_len
                                    << " splits=" << c.splits << " device_len=" << c.device_len);
  KvCacheLayout layout{c.batch, c.kv_heads, c.capacity, c.head_dim, 0, 0, c.stride_p};
  const KvCacheLayout l = layout.packed();
  const int q_heads = c.kv_heads * c.group;
  const size_t cache_elems = size_t(l.stride_b) * c.batch;
  const HostData q = encode(c.dtype, random_values(size_t(c.batch) * q_heads * c.head_dim, seed, 1.0f));
  const HostData k = encode(c.dtype, random_values(cache_elems, seed + 1, 1.0f));
  const HostData v = encode(c.dtype, random_values(cache_elems, seed + 2, 1.0f));
  DeviceBuffer dq = to_device(q, stream.get()), dk = to_device(k, stream.get()), dv = to_device(v, stream.get());
  DeviceBuffer dout(q.bytes.size());
  DeviceBuffer dlen(sizeof(int));
  const int len = c.device_len >= 0 ? c.device_len : c.seq_len;
  dlen.upload(&len, sizeof(int), stream.get());
  DecodeAttentionArgs args;
  args.dtype = c.dtype;
  args.cache = layout;
  args.q_heads = q_heads;
  args.seq_len = c.seq_len;
  args.seq_len_ptr = c.device_len >= 0 ? dlen.ptr() : 0;
  args.q = dq.ptr(), args.k = dk.ptr(), args.v = dv.ptr(), args.out = dout.ptr();
  const int splits = c.splits ? c.splits : choose_attention_splits(args, ctx.info().sm_count);
  DeviceBuffer workspace(decode_attention_workspace_bytes(args, splits));
  launch_decode_attention(cache, args, workspace.ptr(), workspace.bytes(), splits, stream.get());
  const std::vector<double> out = from_device(dout, c.dtype, stream.get());
  const double scale = 1.0 / std::sqrt(double(c.head_dim));
  int bad = 0;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < q_heads; ++h) {
      const int kvh = h / c.group;
      std::vector<double> scores(len);
      double m = -INFINITY;
      for (int p = 0; p < len; ++p) {
        double dot = 0;
        for (int d = 0; d < c.head_dim; ++d)
          dot += q.values[(size_t(b) * q_heads + h) * c.head_dim + d] *
                 k.values[size_t(b * l.stride_b + kvh * l.stride_h + p * l.stride_p + d)];
        scores[p] = dot * scale;
        m = std::max(m, scores[p]);
      }
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - m));
      for (int d = 0; d < c.head_dim; ++d) {
        double ref = 0;
        for (int p = 0; p < len; ++p) ref += scores[p] / sum * v.values[size_t(b * l.stride_b + kvh * l.stride_h + p * l.stride_p + d)];
        const double got = out[(size_t(b) * q_heads + h) * c.head_dim + d];
        if (!(std::fabs(got - ref) <= tolerance(c.dtype) * std::max(0.1, std::fabs(ref)) + 2e-3) && bad++ < 5)
          ADD_FAILURE() << "out[" << b << "," << h << "," << d << "] = " << got << ", reference " << ref;
      }
    }
  EXPECT_EQ(bad, 0);
}
}  // namespace

TEST_F(DecodeAttention, MatchesReference) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 1;
  run(ctx, stream, cache, {DType::BF16, 1, 8, 4, 128, 600, 517}, seed += 10);  // Llama-3-8B heads
  run(ctx, stream, cache, {DType::F32, 2, 2, 2, 64, 40, 33}, seed += 10);
  run(ctx, stream, cache, {DType::F16, 1, 1, 8, 256, 1000, 1000}, seed += 10);
  run(ctx, stream, cache, {DType::BF16, 1, 4, 1, 128, 16, 1}, seed += 10);  // a single position
  run(ctx, stream, cache, {DType::BF16, 3, 2, 4, 64, 300, 129, 1}, seed += 10);
  run(ctx, stream, cache, {DType::BF16, 1, 2, 2, 128, 300, 257, 7}, seed += 10);
  run(ctx, stream, cache, {DType::BF16, 1, 2, 4, 128, 100, 90, 0, -1, 136}, seed += 10);  // padded rows
}

TEST_F(DecodeAttention, LengthFromDeviceMemory) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  run(ctx, stream, cache, {DType::BF16, 1, 8, 4, 128, 1024, 1024, 0, 300}, 5);
  run(ctx, stream, cache, {DType::BF16, 1, 8, 4, 128, 1024, 1024, 0, 0}, 6);  // empty: zeros
}

TEST_F(DecodeAttention, RejectsBadShapes) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  DeviceBuffer buf(1 << 20);
  DecodeAttentionArgs args;
  args.cache = {1, 3, 64, 128, 0, 0, 0};
  args.q_heads = 8;  // not a multiple of 3
  args.seq_len = 10;
  args.q = args.k = args.v = args.out = buf.ptr();
  EXPECT_THROW(launch_decode_attention(cache, args, buf.ptr(), buf.bytes(), 1, stream.get()), luminal::Error);
  args.cache.kv_heads = 2;
  args.cache.head_dim = 96;  // unsupported head dim
  EXPECT_THROW(launch_decode_attention(cache, args, buf.ptr(), buf.bytes(), 1, stream.get()), luminal::Error);
  args.cache.head_dim = 128;
  args.seq_len = 65;  // past the capacity
  EXPECT_THROW(launch_decode_attention(cache, args, buf.ptr(), buf.bytes(), 1, stream.get()), luminal::Error);
}

// The prefill kernel (attention_flash.cu) against the rows kernel (attention_rows.cu), both
// the CudaAttention contract, on the same operands: a 512-token prompt of Llama-3-8B's
// attention (8 kv heads, 4 query heads each, head dim 128; q, k, v as the runtime lays them
// out), a causal mask of -inf (half the tiles skipped) and of -1e9 (none skipped: the mask
// is finite), and a prompt of 100 tokens at head dim 64 with a per-element scale; BF16 and
// F16. Prints each kernel's time (CUDA events, 20 launches): a measurement, not asserted.
// `huge_tail` makes the last 64 keys near the dtype's largest value: their scores overflow
// to +-inf where the mask hides them from the earlier rows, and -inf + inf is NaN there, so
// a kernel that skipped those masked tiles without its bound on the scores would give
// finite rows where the primitives give NaN (NaN must match NaN). The rows that see those
// keys have q = 0 (scores of 0), so that no order of the sums decides their softmax.
namespace {
struct PrefillCase {
  DType dtype;
  int kv_heads, group, seq, depth;
  bool infinite_mask, scalar_scale;
  bool huge_tail = false;
};

void run_prefill(Context& ctx, Stream& stream, ModuleCache& cache, const PrefillCase& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << luminal::dtype_name(c.dtype) << " kvh=" << c.kv_heads << " g=" << c.group
                                    << " seq=" << c.seq << " d=" << c.depth << " inf_mask=" << c.infinite_mask
                                    << " scalar_scale=" << c.scalar_scale);
  const int64_t rows = int64_t(c.group) * c.seq, keys = c.seq, d = c.depth, batch = c.kv_heads;
  std::vector<float> q_values = random_values(size_t(batch * rows * d), seed, 1.0f);
  if (c.huge_tail)
    for (int64_t r = 0; r < batch * rows; ++r)
      if ((r % rows) % c.seq >= keys - 64)
        for (int64_t e = 0; e < d; ++e) q_values[size_t(r * d + e)] = 0.0f;
  const HostData q = encode(c.dtype, q_values);
  std::vector<float> k_values = random_values(size_t(batch * keys * d), seed + 1, 1.0f);
  if (c.huge_tail) {
    const float huge = c.dtype == DType::F16 ? 30000.0f : 3e38f;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = std::max<int64_t>(0, keys - 64); j < keys; ++j)
        for (int64_t e = 0; e < d; ++e) k_values[size_t((b * keys + j) * d + e)] *= huge;
  }
  const HostData k = encode(c.dtype, k_values);
  const HostData v = encode(c.dtype, random_values(size_t(batch * keys * d), seed + 2, 1.0f));
  std::vector<float> mask(size_t(c.seq * keys)), scale(c.scalar_scale ? 1 : size_t(c.seq * keys));
  for (int i = 0; i < c.seq; ++i)
    for (int64_t j = 0; j < keys; ++j) mask[size_t(i * keys + j)] = j <= i ? 0.0f : c.infinite_mask ? -INFINITY : -1e9f;
  const std::vector<float> scales = random_values(scale.size(), seed + 3, 0.2f);
  for (size_t e = 0; e < scale.size(); ++e) scale[e] = c.scalar_scale ? float(1.0 / std::sqrt(double(d))) : 0.1f + scales[e];
  DeviceBuffer dq = to_device(q, stream.get()), dk = to_device(k, stream.get()), dv = to_device(v, stream.get());
  DeviceBuffer dmask(mask.size() * 4), dscale(scale.size() * 4);
  dmask.upload(mask, stream.get());
  dscale.upload(scale, stream.get());
  const int64_t ss = c.scalar_scale ? 0 : 1;  // the scale's strides: 0 everywhere, or the mask's
  const std::vector<int64_t> params{batch, rows, c.group, c.seq, keys, d, d,
                                    0, rows * d, d, 1,       // q [batch, rows, depth]
                                    0, keys * d, 1, d,       // k [batch, keys, depth] read as depth x keys
                                    0, keys * d, d, 1,       // v [batch, keys, width]
                                    0, 0, 0, keys, 1,        // mask [seq, keys], broadcast over batch and group
                                    0, 0, 0, keys * ss, ss};
  ASSERT_EQ(params.size(), size_t(kAttentionRowsParams));
  DeviceBuffer dparams(params.size() * 8);
  dparams.upload(params, stream.get());
  DeviceBuffer out_rows(size_t(batch * rows * d) * 2), out_flash(out_rows.bytes());
  const int split = attention_rows_split(ctx.info().cc_major);
  api::CUfunction rows_fn = cache.function(attention_rows_source(c.dtype, split), kAttentionRowsKernelName);
  api::CUfunction flash_fn = cache.function(attention_flash_source(c.dtype, c.depth), kAttentionFlashKernelName);
  auto launch = [&](bool flash) {
    DevicePtr a[7] = {dq.ptr(), dk.ptr(), dv.ptr(), dmask.ptr(), dscale.ptr(), flash ? out_flash.ptr() : out_rows.ptr(),
                      dparams.ptr()};
    void* args[7] = {&a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6]};
    if (flash)
      launch_kernel(flash_fn, unsigned(batch * ((rows + kAttentionFlashRows - 1) / kAttentionFlashRows)), 1, 1,
                    kAttentionFlashThreads, 0, stream.get(), args);
    else
      launch_kernel(rows_fn, unsigned(batch * rows * split), 1, 1, kAttentionRowsThreads, 0, stream.get(), args);
  };
  double us[2];
  for (int flash = 0; flash < 2; ++flash) {
    launch(flash);
    Event start, end;
    start.record(stream.get());
    constexpr int kRuns = 20;
    for (int r = 0; r < kRuns; ++r) launch(flash);
    end.record(stream.get());
    end.synchronize();
    us[flash] = Event::elapsed_ms(start, end) * 1000.0 / kRuns;
  }
  const std::vector<double> want = from_device(out_rows, c.dtype, stream.get());
  const std::vector<double> got = from_device(out_flash, c.dtype, stream.get());
  int bad = 0, nans = 0;
  double worst = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    if (std::isnan(want[e]) || std::isnan(got[e])) {
      if (!(std::isnan(want[e]) && std::isnan(got[e])) && bad++ < 5)
        ADD_FAILURE() << "out[" << e << "] = " << got[e] << ", rows kernel " << want[e];
      nans += std::isnan(want[e]) ? 1 : 0;
      continue;
    }
    const double diff = std::fabs(got[e] - want[e]);
    worst = std::max(worst, diff / (1.0 + std::fabs(want[e])));
    // Two roundings to the dtype apart at most (the probabilities, then the result).
    if (!(diff <= 2 * tolerance(c.dtype) * (1.0 + std::fabs(want[e]))) && bad++ < 5)
      ADD_FAILURE() << "out[" << e << "] = " << got[e] << ", rows kernel " << want[e];
  }
  EXPECT_EQ(bad, 0);
  if (c.huge_tail) {
    EXPECT_GT(nans, 0) << "the huge keys were meant to overflow some masked scores";
  }
  std::printf("prefill attention %s kv %d x %lld rows x %lld keys, d %lld%s: rows kernel %.1f us, tensor cores %.1f us "
              "(%.2fx), max rel diff %.3g\n",
              std::string(luminal::dtype_name(c.dtype)).c_str(), c.kv_heads, static_cast<long long>(rows), static_cast<long long>(keys),
              static_cast<long long>(d), c.infinite_mask ? ", -inf mask" : ", -1e9 mask", us[0], us[1], us[0] / us[1],
              worst);
}
}  // namespace

TEST(AttentionFlash, MatchesTheRowsKernelOnAPrefill) {
  LUMINAL_REQUIRE_GPU();
  Context ctx;
  if (ctx.info().cc_major < 8) GTEST_SKIP() << "skipped: the tensor-core kernel needs sm_80";
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 40;
  run_prefill(ctx, stream, cache, {DType::BF16, 8, 4, 512, 128, true, true}, seed += 10);
  run_prefill(ctx, stream, cache, {DType::BF16, 8, 4, 512, 128, false, true}, seed += 10);
  run_prefill(ctx, stream, cache, {DType::F16, 8, 4, 512, 128, true, true}, seed += 10);
  run_prefill(ctx, stream, cache, {DType::BF16, 2, 3, 100, 64, true, false}, seed += 10);
  run_prefill(ctx, stream, cache, {DType::F16, 3, 1, 77, 64, false, false}, seed += 10);
  run_prefill(ctx, stream, cache, {DType::F16, 2, 2, 300, 64, true, true, true}, seed += 10);
  run_prefill(ctx, stream, cache, {DType::BF16, 2, 4, 256, 128, true, true, true}, seed += 10);
}
