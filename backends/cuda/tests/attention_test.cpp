// Decode attention (split-K over the sequence, grouped-query heads) against a double CPU
// reference, on the GPU; also the device-side length used inside CUDA graphs.
#include <gtest/gtest.h>

#include <cmath>

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
