// GEMV / skinny GEMM against a double-precision CPU reference, on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "luminal/error.hpp"
#include "luminal_cuda/kernels.hpp"
#include "test_util.hpp"

using namespace luminal::cuda;
using namespace luminal::cuda::test_util;
using luminal::DType;

namespace {

double activate(double v, Activation act) {
  switch (act) {
    case Activation::Relu: return v > 0 ? v : 0;
    case Activation::Silu: return v / (1 + std::exp(-v));
    case Activation::GeluTanh: return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    default: return v;
  }
}

struct Case {
  DType dtype;
  int M, N, K;
  Activation act;
  bool bias, residual;
  GemvConfig config{};
  size_t misalign_bytes = 0;  // offset x and w to force the scalar path
  std::optional<DType> weight_dtype{};  // w's dtype when narrower than x's (F32 with F16/BF16)
};

void run_case(Context& ctx, Stream& stream, ModuleCache& cache, const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << luminal::dtype_name(c.dtype) << " M=" << c.M << " N=" << c.N << " K=" << c.K
                                  << " act=" << activation_name(c.act) << " bias=" << c.bias << " res=" << c.residual
                                  << " ksplit=" << c.config.ksplit << " rpw=" << c.config.rows_per_warp
                                  << " unroll=" << c.config.unroll
                                  << " misalign=" << c.misalign_bytes
                                  << " w=" << luminal::dtype_name(c.weight_dtype.value_or(c.dtype)));
  const HostData x = encode(c.dtype, random_values(size_t(c.M) * c.K, seed));
  const HostData w = encode(c.weight_dtype.value_or(c.dtype), random_values(size_t(c.N) * c.K, seed + 1));
  const HostData b = encode(c.dtype, random_values(c.N, seed + 2));
  const HostData r = encode(c.dtype, random_values(size_t(c.M) * c.N, seed + 3));
  // Upload with an optional leading offset so the kernel sees misaligned rows.
  auto upload = [&](const HostData& d) {
    DeviceBuffer buf(d.bytes.size() + c.misalign_bytes);
    buf.upload(d.bytes.data(), d.bytes.size(), stream.get(), c.misalign_bytes);
    return buf;
  };
  DeviceBuffer dx = upload(x), dw = upload(w), db = to_device(b, stream.get()), dr = to_device(r, stream.get());
  DeviceBuffer dy(size_t(c.M) * c.N * luminal::dtype_bytes(c.dtype));
  GemvArgs args;
  args.dtype = c.dtype;
  args.weight_dtype = c.weight_dtype;
  args.M = c.M, args.N = c.N, args.K = c.K;
  args.x = dx.ptr() + c.misalign_bytes;
  args.w = dw.ptr() + c.misalign_bytes;
  args.bias = c.bias ? db.ptr() : 0;
  args.residual = c.residual ? dr.ptr() : 0;
  args.y = dy.ptr();
  args.act = c.act;
  launch_gemv(cache, args, stream.get(), ctx.info().sm_count, c.config);
  stream.synchronize();
  const std::vector<double> y = from_device(dy, c.dtype, stream.get());
  int bad = 0;
  for (int m = 0; m < c.M; ++m)
    for (int n = 0; n < c.N; ++n) {
      double acc = 0, magnitude = 0;
      for (int k = 0; k < c.K; ++k) {
        const double p = x.values[size_t(m) * c.K + k] * w.values[size_t(n) * c.K + k];
        acc += p;
        magnitude += std::fabs(p);
      }
      if (c.bias) acc += b.values[n];
      double ref = activate(acc, c.act);
      if (c.residual) ref += r.values[size_t(m) * c.N + n];
      const double got = y[size_t(m) * c.N + n];
      const double allowed = tolerance(c.dtype) * std::max(1.0, std::fabs(ref)) + 1e-5 * magnitude;
      if (!(std::fabs(got - ref) <= allowed) && bad++ < 5)
        ADD_FAILURE() << "y[" << m << "," << n << "] = " << got << ", reference " << ref;
    }
  EXPECT_EQ(bad, 0);
}

class Gemv : public ::testing::Test {
 protected:
  void SetUp() override { LUMINAL_REQUIRE_GPU(); }
};

}  // namespace

TEST_F(Gemv, MatchesReferenceAcrossDtypesShapesAndEpilogues) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 11;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    run_case(ctx, stream, cache, {dt, 1, 37, 64, Activation::None, false, false}, seed++);
    run_case(ctx, stream, cache, {dt, 3, 129, 200, Activation::Silu, true, false}, seed++);
    run_case(ctx, stream, cache, {dt, 5, 70, 77, Activation::GeluTanh, true, true}, seed++);  // odd K: scalar path
    run_case(ctx, stream, cache, {dt, 16, 300, 1024, Activation::Relu, false, true}, seed++);
    run_case(ctx, stream, cache, {dt, 9, 33, 4104, Activation::None, true, true}, seed++);
    run_case(ctx, stream, cache, {dt, 2, 1, 3000, Activation::Silu, false, false}, seed++);
  }
}

TEST_F(Gemv, F32ProductsReadHalfWeightsInPlace) {
  // The half-weights rule: x and y in F32, w in F16 or BF16 (the values w holds; the
  // reference multiplies the same decoded values in double, so only fp32 accumulation and
  // the F32 result round). Vector path (K % 8 == 0), scalar path (odd K), misaligned w,
  // decode and skinny shapes, epilogues.
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 71;
  for (DType wdt : {DType::F16, DType::BF16}) {
    Case c{DType::F32, 1, 37, 64, Activation::None, false, false};
    c.weight_dtype = wdt;
    run_case(ctx, stream, cache, c, seed++);
    c = {DType::F32, 3, 129, 200, Activation::Silu, true, false};
    c.weight_dtype = wdt;
    run_case(ctx, stream, cache, c, seed++);
    c = {DType::F32, 5, 70, 77, Activation::GeluTanh, true, true};  // odd K: scalar path
    c.weight_dtype = wdt;
    run_case(ctx, stream, cache, c, seed++);
    c = {DType::F32, 16, 300, 1032, Activation::None, false, true};
    c.weight_dtype = wdt;
    run_case(ctx, stream, cache, c, seed++);
    c = {DType::F32, 2, 4099, 4096, Activation::None, false, false};  // decode-like, many warps
    c.weight_dtype = wdt;
    run_case(ctx, stream, cache, c, seed++);
    c = {DType::F32, 1, 65, 512, Activation::None, false, false, GemvConfig{}, 8};  // misaligned: scalar
    c.weight_dtype = wdt;
    run_case(ctx, stream, cache, c, seed++);
  }
  EXPECT_THROW(gemv_source(DType::BF16, 1, 1, Activation::None, 4, DType::F32), luminal::Error);
  EXPECT_THROW(gemv_source(DType::F16, 1, 1, Activation::None, 4, DType::BF16), luminal::Error);
}

TEST_F(Gemv, EveryConfigGivesTheSameAnswer) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 101;
  // Compile every variant first, in parallel, instead of one by one at first launch.
  std::vector<KernelSource> sources;
  for (int m_max : {1, 8})
    for (int rpw : {1, 2, 4})
      for (int unroll : {2, 4, 8}) sources.push_back(gemv_source(DType::BF16, m_max, rpw, Activation::Silu, unroll));
  cache.cubins(sources);
  for (int ksplit : {1, 2, 4, 8})
    for (int rpw : {1, 2, 4})
      for (int unroll : {2, 4, 8})
        for (int M : {1, 7})
          run_case(ctx, stream, cache,
                   {DType::BF16, M, 259, 2056, Activation::Silu, true, true, GemvConfig{ksplit, rpw, unroll}}, seed++);
}

TEST_F(Gemv, MisalignedPointersTakeTheScalarPath) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  run_case(ctx, stream, cache, {DType::BF16, 2, 65, 512, Activation::None, true, false, {}, 2}, 7);
  run_case(ctx, stream, cache, {DType::F32, 4, 31, 96, Activation::Relu, false, true, {}, 4}, 8);
}

// Siblings in one launch (launch_gemv_group): members of different widths, 1 to 4 of them,
// decode and skinny rows, the vector path and (a misaligned member) the scalar path for all.
TEST_F(Gemv, GroupsMatchEachMemberAlone) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 301;
  struct GroupCase {
    DType dtype;
    int M, K;
    std::vector<int> N;
    size_t misalign_bytes;
    std::optional<DType> weight_dtype;
  };
  const GroupCase cases[] = {
      {DType::BF16, 1, 4096, {4096, 1024, 1024}, 0, {}},  // q, k, v of a grouped-query block
      {DType::BF16, 1, 512, {1536, 1536}, 0, {}},         // gate and up
      {DType::F16, 5, 264, {37, 1, 300, 64}, 0, {}},
      {DType::F32, 2, 200, {129, 7}, 0, {}},
      {DType::BF16, 3, 96, {33, 70}, 2, {}},  // misaligned: the scalar path
      {DType::F32, 1, 1032, {300, 41, 9}, 0, DType::BF16},
      {DType::BF16, 16, 128, {17}, 0, {}},
  };
  for (const GroupCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << luminal::dtype_name(c.dtype) << " M=" << c.M << " K=" << c.K
                                      << " members=" << c.N.size() << " misalign=" << c.misalign_bytes);
    const DType wdt = c.weight_dtype.value_or(c.dtype);
    const HostData x = encode(c.dtype, random_values(size_t(c.M) * c.K, seed++));
    DeviceBuffer dx(x.bytes.size() + c.misalign_bytes);
    dx.upload(x.bytes.data(), x.bytes.size(), stream.get(), c.misalign_bytes);
    GemvGroupArgs args;
    args.dtype = c.dtype;
    args.weight_dtype = c.weight_dtype;
    args.M = c.M, args.K = c.K;
    args.x = dx.ptr() + c.misalign_bytes;
    std::vector<HostData> ws;
    std::vector<DeviceBuffer> dws, dys;
    for (int n : c.N) {
      ws.push_back(encode(wdt, random_values(size_t(n) * c.K, seed++)));
      dws.emplace_back(ws.back().bytes.size() + c.misalign_bytes);
      dws.back().upload(ws.back().bytes.data(), ws.back().bytes.size(), stream.get(), c.misalign_bytes);
      dys.emplace_back(size_t(c.M) * n * luminal::dtype_bytes(c.dtype));
      args.w[args.count] = dws.back().ptr() + c.misalign_bytes;
      args.y[args.count] = dys.back().ptr();
      args.N[args.count] = n;
      ++args.count;
    }
    launch_gemv_group(cache, args, stream.get(), ctx.info().sm_count);
    stream.synchronize();
    int bad = 0;
    for (size_t p = 0; p < c.N.size(); ++p) {
      const std::vector<double> y = from_device(dys[p], c.dtype, stream.get());
      for (int m = 0; m < c.M; ++m)
        for (int n = 0; n < c.N[p]; ++n) {
          double ref = 0, magnitude = 0;
          for (int k = 0; k < c.K; ++k) {
            const double prod = x.values[size_t(m) * c.K + k] * ws[p].values[size_t(n) * c.K + k];
            ref += prod;
            magnitude += std::fabs(prod);
          }
          const double got = y[size_t(m) * c.N[p] + n];
          const double allowed = tolerance(c.dtype) * std::max(1.0, std::fabs(ref)) + 1e-5 * magnitude;
          if (!(std::fabs(got - ref) <= allowed) && bad++ < 5)
            ADD_FAILURE() << "member " << p << " y[" << m << "," << n << "] = " << got << ", reference " << ref;
        }
    }
    EXPECT_EQ(bad, 0);
  }
  GemvGroupArgs empty;
  empty.K = 8;
  empty.x = 16;
  EXPECT_THROW(launch_gemv_group(cache, empty, stream.get(), ctx.info().sm_count), luminal::Error);
}

TEST_F(Gemv, RejectsBadShapes) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  DeviceBuffer buf(1024);
  GemvArgs args;
  args.M = 17, args.N = 4, args.K = 8;
  args.x = args.w = args.y = buf.ptr();
  EXPECT_THROW(launch_gemv(cache, args, stream.get(), ctx.info().sm_count), luminal::Error);
  args.M = 1;
  args.dtype = DType::I32;
  EXPECT_THROW(launch_gemv(cache, args, stream.get(), ctx.info().sm_count), luminal::Error);
}
