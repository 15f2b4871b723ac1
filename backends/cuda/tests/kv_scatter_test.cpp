// In-place scatter of new K/V rows into a KV cache, on the GPU: exact copies at the right
// positions, nothing else touched, the start read from device memory, overflow dropped.
#include <gtest/gtest.h>

#include "luminal_cuda/kernels.hpp"
#include "test_util.hpp"

using namespace luminal::cuda;
using namespace luminal::cuda::test_util;
using luminal::DType;

namespace {
class KvScatter : public ::testing::Test {
 protected:
  void SetUp() override { LUMINAL_REQUIRE_GPU(); }
};

void run(Context&, Stream& stream, ModuleCache& cache, DType dt, KvCacheLayout layout, int new_len, int start,
         bool start_on_device, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << luminal::dtype_name(dt) << " heads=" << layout.kv_heads << " d=" << layout.head_dim
                                    << " new=" << new_len << " start=" << start << " device=" << start_on_device);
  const KvCacheLayout l = layout.packed();
  const size_t cache_elems = size_t(l.stride_b) * l.batch;
  const size_t new_elems = size_t(l.batch) * l.kv_heads * new_len * l.head_dim;
  const HostData k_cache = encode(dt, random_values(cache_elems, seed));
  const HostData v_cache = encode(dt, random_values(cache_elems, seed + 1));
  const HostData k_new = encode(dt, random_values(new_elems, seed + 2));
  const HostData v_new = encode(dt, random_values(new_elems, seed + 3));
  DeviceBuffer dkc = to_device(k_cache, stream.get()), dvc = to_device(v_cache, stream.get());
  DeviceBuffer dkn = to_device(k_new, stream.get()), dvn = to_device(v_new, stream.get());
  DeviceBuffer dstart(sizeof(int));
  dstart.upload(&start, sizeof(int), stream.get());
  launch_kv_scatter(cache, dt, layout, dkn.ptr(), dvn.ptr(), new_len, dkc.ptr(), dvc.ptr(), start_on_device ? -12345 : start,
                    start_on_device ? dstart.ptr() : 0, stream.get());
  std::vector<double> k_expect = k_cache.values, v_expect = v_cache.values;
  for (int b = 0; b < l.batch; ++b)
    for (int h = 0; h < l.kv_heads; ++h)
      for (int t = 0; t < new_len; ++t) {
        const int p = start + t;
        if (p >= l.capacity) continue;
        for (int d = 0; d < l.head_dim; ++d) {
          const size_t src = ((size_t(b) * l.kv_heads + h) * new_len + t) * l.head_dim + d;
          const size_t dst = size_t(b * l.stride_b + h * l.stride_h + p * l.stride_p + d);
          k_expect[dst] = k_new.values[src];
          v_expect[dst] = v_new.values[src];
        }
      }
  EXPECT_EQ(from_device(dkc, dt, stream.get()), k_expect);
  EXPECT_EQ(from_device(dvc, dt, stream.get()), v_expect);
}
}  // namespace

TEST_F(KvScatter, WritesExactlyTheNewRows) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 1;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    run(ctx, stream, cache, dt, {1, 8, 64, 128, 0, 0, 0}, 1, 17, false, seed += 4);     // decode: one row
    run(ctx, stream, cache, dt, {2, 3, 40, 64, 0, 0, 0}, 13, 5, false, seed += 4);      // prefill chunk
    run(ctx, stream, cache, dt, {1, 2, 20, 6, 0, 0, 0}, 3, 2, false, seed += 4);        // odd head dim: scalar path
    run(ctx, stream, cache, dt, {2, 2, 16, 64, 0, 0, 72}, 4, 9, false, seed += 4);      // padded rows
  }
}

TEST_F(KvScatter, StartFromDeviceMemoryAndOverflowDropped) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  run(ctx, stream, cache, DType::BF16, {1, 4, 32, 128, 0, 0, 0}, 2, 30, true, 100);  // last two slots
  run(ctx, stream, cache, DType::BF16, {1, 4, 32, 128, 0, 0, 0}, 5, 30, true, 200);  // 3 rows past the end dropped
  run(ctx, stream, cache, DType::F32, {1, 2, 8, 16, 0, 0, 0}, 3, 7, false, 300);
}
