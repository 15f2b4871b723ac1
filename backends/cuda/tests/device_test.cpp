// Device memory, copies, events and CUDA graphs, on the GPU; including a decode step
// (append a K/V row, attend over the cache) captured once and replayed as the position
// advances through device memory, with no re-capture.
#include <gtest/gtest.h>

#include <cmath>

#include "luminal_cuda/kernels.hpp"
#include "test_util.hpp"

using namespace luminal::cuda;
using namespace luminal::cuda::test_util;
using luminal::DType;

namespace {
class Device : public ::testing::Test {
 protected:
  void SetUp() override { LUMINAL_REQUIRE_GPU(); }
};
}  // namespace

TEST_F(Device, InfoAndMemoryRoundTrips) {
  Context ctx;
  EXPECT_GT(ctx.info().sm_count, 0);
  EXPECT_GT(ctx.info().total_memory, 0u);
  EXPECT_EQ(ctx.info().arch().rfind("sm_", 0), 0u);
  Stream stream;
  std::vector<float> host = random_values(1001, 3);
  DeviceBuffer a(host.size() * sizeof(float) + 12), b(a.bytes());
  a.upload(host.data(), host.size() * sizeof(float), stream.get(), 12);
  copy_device_to_device(b.ptr(), a.ptr(), a.bytes(), stream.get());
  std::vector<float> back(host.size());
  b.download(back.data(), back.size() * sizeof(float), stream.get(), 12);
  EXPECT_EQ(back, host);
  b.zero(stream.get());
  b.download(back.data(), back.size() * sizeof(float), stream.get(), 12);
  EXPECT_EQ(back, std::vector<float>(host.size(), 0.0f));
  EXPECT_THROW(a.upload(host.data(), host.size() * sizeof(float), stream.get(), 16), luminal::Error);
  DeviceBuffer moved = std::move(a);
  EXPECT_EQ(a.ptr(), 0u);
  EXPECT_NE(moved.ptr(), 0u);
  DeviceBuffer empty(0);
  EXPECT_EQ(empty.ptr(), 0u);
}

TEST_F(Device, EventsAndTiming) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  DeviceBuffer buf(64 << 20);
  auto fill = [&] { fill_uniform(cache, DType::F32, buf.ptr(), int64_t(buf.bytes() / 4), 7, 1.0f, stream.get()); };
  fill();  // loads the module before any capture
  stream.synchronize();
  const double eager = time_ms(stream.get(), fill, 4, 3, /*use_graph=*/false);
  const double graphed = time_ms(stream.get(), fill, 4, 3, /*use_graph=*/true);
  EXPECT_GT(eager, 0.0);
  EXPECT_GT(graphed, 0.0);
  std::printf("fill 64 MB: eager %.1f us, graph %.1f us per launch\n", eager * 1e3, graphed * 1e3);
}

// The compiler makes a model segment's verification inputs on the device: with specials,
// about one element in 8 must be a special value of the dtype, the rest uniform in
// [-scale, scale); without, none; without the large magnitudes, none above 2 but the
// infinities.
TEST_F(Device, AdversarialFillMixesSpecialValuesIntoEveryDtype) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  const int64_t n = 100003;  // odd: the grid-stride loop's tail
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (FillSpecials specials : {FillSpecials::None, FillSpecials::All, FillSpecials::NoLargeMagnitudes}) {
      SCOPED_TRACE(std::string(luminal::dtype_name(dt)) + " specials " + std::to_string(static_cast<int>(specials)));
      DeviceBuffer buf(size_t(n) * luminal::dtype_bytes(dt));
      fill_uniform(cache, dt, buf.ptr(), n, 11, 2.0f, stream.get(), specials);
      std::vector<uint8_t> bytes(buf.bytes());
      buf.download(bytes.data(), bytes.size(), stream.get());
      stream.synchronize();
      int64_t nan = 0, pos_inf = 0, neg_inf = 0, neg_zero = 0, outside = 0, other = 0;
      for (double v : decode(dt, bytes)) {
        if (std::isnan(v)) ++nan;
        else if (std::isinf(v)) ++(v > 0 ? pos_inf : neg_inf);
        else if (v == 0 && std::signbit(v)) ++neg_zero;
        else if (std::abs(v) > 2.0) ++outside;  // 65504 (F16: overflows to inf) or -3e38
        else ++other;
      }
      if (specials == FillSpecials::None) {
        EXPECT_EQ(nan + pos_inf + neg_inf + outside, 0);
        EXPECT_EQ(other + neg_zero, n);
        continue;
      }
      const bool large = specials == FillSpecials::All;
      if (!large) {
        EXPECT_EQ(outside, 0);
      }
      // Each of the 11 (9) specials appears in about n / 88 (n / 72) elements.
      const int64_t each = n / (large ? 88 : 72);
      EXPECT_GT(nan, each / 2);
      EXPECT_GT(pos_inf, each / 2);
      EXPECT_GT(neg_inf, each / 2);
      EXPECT_GT(neg_zero, each / 2);
      // Told apart from uniform values here: NaN, +-inf, -0, and 65504 and -3e38 (6 of the
      // 11; 4 of the 9); in F16 -1e-40 also becomes -0 (one more).
      const double told_apart = (large ? 6.0 : 4.0) + (dt == DType::F16 ? 1.0 : 0.0);
      EXPECT_NEAR(double(nan + pos_inf + neg_inf + neg_zero + outside), double(n) / 8 * told_apart / (large ? 11 : 9),
                  double(n) / 200);
    }
}

TEST_F(Device, CapturedDecodeStepReplaysAsThePositionAdvances) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  const DType dt = DType::BF16;
  const KvCacheLayout layout{1, 2, 64, 128, 0, 0, 0};
  const KvCacheLayout l = layout.packed();
  const int q_heads = 8, steps = 5;
  const size_t row_elems = size_t(l.kv_heads) * l.head_dim;
  DeviceBuffer k_cache(size_t(l.stride_b) * 2), v_cache(size_t(l.stride_b) * 2);
  k_cache.zero(stream.get());
  v_cache.zero(stream.get());
  DeviceBuffer k_new(row_elems * 2), v_new(row_elems * 2), q(size_t(q_heads) * l.head_dim * 2), out(q.bytes());
  DeviceBuffer position(sizeof(int)), length(sizeof(int));
  DecodeAttentionArgs args;
  args.dtype = dt;
  args.cache = layout;
  args.q_heads = q_heads;
  args.seq_len = l.capacity;  // the bound; the real length is read on the device
  args.seq_len_ptr = length.ptr();
  args.q = q.ptr(), args.k = k_cache.ptr(), args.v = v_cache.ptr(), args.out = out.ptr();
  const int splits = 4;
  DeviceBuffer workspace(decode_attention_workspace_bytes(args, splits));
  auto step = [&] {
    launch_kv_scatter(cache, dt, layout, k_new.ptr(), v_new.ptr(), 1, k_cache.ptr(), v_cache.ptr(), 0, position.ptr(),
                      stream.get());
    launch_decode_attention(cache, args, workspace.ptr(), workspace.bytes(), splits, stream.get());
  };
  // Load the modules outside the capture with a harmless first run at position 0.
  int zero = 0, one = 1;
  position.upload(&zero, sizeof(int), stream.get());
  length.upload(&one, sizeof(int), stream.get());
  step();
  stream.synchronize();
  Graph graph(stream.get(), step);

  std::vector<std::vector<double>> k_rows, v_rows;
  HostData qh;
  for (int t = 0; t < steps; ++t) {
    const HostData kh = encode(dt, random_values(row_elems, 100 + t)), vh = encode(dt, random_values(row_elems, 200 + t));
    qh = encode(dt, random_values(size_t(q_heads) * l.head_dim, 300 + t));
    k_new.upload(kh.bytes.data(), kh.bytes.size(), stream.get());
    v_new.upload(vh.bytes.data(), vh.bytes.size(), stream.get());
    q.upload(qh.bytes.data(), qh.bytes.size(), stream.get());
    const int len = t + 1;
    position.upload(&t, sizeof(int), stream.get());
    length.upload(&len, sizeof(int), stream.get());
    graph.launch(stream.get());
    stream.synchronize();
    k_rows.push_back(kh.values);
    v_rows.push_back(vh.values);
  }
  // The output of the last replay against attention over the rows appended so far.
  const std::vector<double> got = from_device(out, dt, stream.get());
  const int group = q_heads / l.kv_heads;
  int bad = 0;
  for (int h = 0; h < q_heads; ++h) {
    const int kvh = h / group;
    std::vector<double> w(steps);
    double m = -INFINITY, sum = 0;
    for (int p = 0; p < steps; ++p) {
      double dot = 0;
      for (int d = 0; d < l.head_dim; ++d) dot += qh.values[size_t(h) * l.head_dim + d] * k_rows[p][size_t(kvh) * l.head_dim + d];
      w[p] = dot / std::sqrt(double(l.head_dim));
      m = std::max(m, w[p]);
    }
    for (double& x : w) sum += (x = std::exp(x - m));
    for (int d = 0; d < l.head_dim; ++d) {
      double ref = 0;
      for (int p = 0; p < steps; ++p) ref += w[p] / sum * v_rows[p][size_t(kvh) * l.head_dim + d];
      const double g = got[size_t(h) * l.head_dim + d];
      if (!(std::fabs(g - ref) <= 2e-2 * std::max(0.1, std::fabs(ref)) + 2e-3) && bad++ < 5)
        ADD_FAILURE() << "out[" << h << "," << d << "] = " << g << ", reference " << ref;
    }
  }
  EXPECT_EQ(bad, 0);
}
