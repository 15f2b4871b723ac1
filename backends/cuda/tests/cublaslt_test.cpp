// cuBLASLt in every operand layout, padded leading dimensions, strided batches, every
// dtype and the bias/activation epilogues, against a double CPU reference, on the GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "luminal_cuda/cublaslt.hpp"
#include "test_util.hpp"

using namespace luminal::cuda;
using namespace luminal::cuda::test_util;
using luminal::DType;

namespace {

struct Stored {
  HostData data;
  MatrixLayout layout;
  int64_t rows, cols;
  double at(int64_t b, int64_t i, int64_t j) const {
    const int64_t ld = layout.ld ? layout.ld : (layout.order == Order::RowMajor ? cols : rows);
    const int64_t stride = layout.batch_stride ? layout.batch_stride : rows * cols;
    const int64_t idx = b * stride + (layout.order == Order::RowMajor ? i * ld + j : j * ld + i);
    return data.values[size_t(idx)];
  }
};

// A batch of logical [rows, cols] matrices stored with `layout`; padding holds random
// values too, so a wrong leading dimension reads garbage and fails.
Stored make(DType dtype, MatrixLayout layout, int64_t rows, int64_t cols, int64_t batch, uint32_t seed) {
  const int64_t ld = layout.ld ? layout.ld : (layout.order == Order::RowMajor ? cols : rows);
  const int64_t outer = layout.order == Order::RowMajor ? rows : cols;
  const int64_t stride = layout.batch_stride ? layout.batch_stride : rows * cols;
  const int64_t total = (batch - 1) * stride + outer * ld;
  return {encode(dtype, random_values(size_t(total), seed)), layout, rows, cols};
}

double activate(double v, Activation act) {
  if (act == Activation::Relu) return v > 0 ? v : 0;
  if (act == Activation::GeluTanh) return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  return v;
}

void run(CublasLt& lt, Stream& stream, const MatmulSpec& spec, uint32_t seed) {
  SCOPED_TRACE(spec.key());
  const Stored a = make(spec.dtype, spec.a, spec.m, spec.k, spec.batch, seed);
  const Stored b = make(spec.dtype, spec.b, spec.k, spec.n, spec.batch, seed + 1);
  Stored d = make(spec.dtype, spec.d, spec.m, spec.n, spec.batch, seed + 2);
  const HostData bias = encode(spec.dtype, random_values(size_t(spec.n), seed + 3));
  DeviceBuffer da = to_device(a.data, stream.get()), db = to_device(b.data, stream.get());
  DeviceBuffer dd = to_device(d.data, stream.get()), dbias = to_device(bias, stream.get());
  lt.matmul(spec, da.ptr(), db.ptr(), dd.ptr(), spec.bias ? dbias.ptr() : 0, stream.get());
  stream.synchronize();
  const Stored before = d;
  d.data.values = from_device(dd, spec.dtype, stream.get());
  const double tol = spec.tf32 ? 1e-2 : tolerance(spec.dtype);
  const double accumulate_tol = spec.tf32 ? 3e-3 : 1e-4;
  int bad = 0;
  for (int64_t bt = 0; bt < spec.batch; ++bt)
    for (int64_t i = 0; i < spec.m; ++i)
      for (int64_t j = 0; j < spec.n; ++j) {
        double acc = 0, magnitude = 0;
        for (int64_t k = 0; k < spec.k; ++k) {
          const double p = a.at(bt, i, k) * b.at(bt, k, j);
          acc += p;
          magnitude += std::fabs(p);
        }
        acc *= spec.alpha;
        if (spec.bias) acc += bias.values[size_t(j)];
        double ref = activate(acc, spec.act);
        if (spec.beta != 0) ref += spec.beta * before.at(bt, i, j);
        const double got = d.at(bt, i, j);
        if (!(std::fabs(got - ref) <= tol * std::max(1.0, std::fabs(ref)) + accumulate_tol * magnitude) && bad++ < 5)
          ADD_FAILURE() << "D[" << bt << "][" << i << "," << j << "] = " << got << ", reference " << ref;
      }
  EXPECT_EQ(bad, 0);
}

class CublasLtMatmul : public ::testing::Test {
 protected:
  void SetUp() override { LUMINAL_REQUIRE_GPU(); }
};

}  // namespace

TEST_F(CublasLtMatmul, EveryLayoutAndDtype) {
  Context ctx;
  Stream stream;
  CublasLt lt;
  uint32_t seed = 1;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (Order oa : {Order::RowMajor, Order::ColMajor})
      for (Order ob : {Order::RowMajor, Order::ColMajor})
        for (Order od : {Order::RowMajor, Order::ColMajor}) {
          MatmulSpec spec;
          spec.dtype = dt;
          spec.m = 37, spec.n = 20, spec.k = 51;
          spec.a.order = oa, spec.b.order = ob, spec.d.order = od;
          run(lt, stream, spec, seed++);
        }
}

TEST_F(CublasLtMatmul, Tf32PaddedLeadingDimensionsAndBeta) {
  Context ctx;
  Stream stream;
  CublasLt lt;
  MatmulSpec spec;
  spec.dtype = DType::F32;
  spec.tf32 = true;
  spec.m = 33, spec.n = 18, spec.k = 64;
  spec.a = {Order::RowMajor, 72, 0};
  spec.b = {Order::ColMajor, 70, 0};
  spec.d = {Order::ColMajor, 40, 0};
  spec.alpha = -0.5f, spec.beta = 0.75f;
  run(lt, stream, spec, 50);
  spec.tf32 = false;
  run(lt, stream, spec, 60);
}

TEST_F(CublasLtMatmul, StridedBatched) {
  Context ctx;
  Stream stream;
  CublasLt lt;
  MatmulSpec spec;
  spec.dtype = DType::BF16;
  spec.m = 17, spec.n = 24, spec.k = 40, spec.batch = 3;
  spec.a = {Order::RowMajor, 0, 17 * 40 + 8};  // gaps between batch entries
  spec.b = {Order::ColMajor, 48, 48 * 24};
  spec.d = {Order::RowMajor, 0, 0};
  run(lt, stream, spec, 70);
  spec.d.order = Order::ColMajor;
  spec.a.order = Order::ColMajor;
  run(lt, stream, spec, 80);
}

TEST_F(CublasLtMatmul, BiasAndActivationEpilogues) {
  Context ctx;
  Stream stream;
  CublasLt lt;
  uint32_t seed = 90;
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (Activation act : {Activation::None, Activation::Relu, Activation::GeluTanh})
      for (bool bias : {false, true}) {
        MatmulSpec spec;
        spec.dtype = dt;
        spec.m = 9, spec.n = 64, spec.k = 72;
        spec.a = {Order::RowMajor, 0, 0};
        spec.b = {Order::ColMajor, 0, 0};  // a linear layer's weight [n, k]
        spec.d = {Order::RowMajor, 0, 0};
        spec.bias = bias, spec.act = act;
        run(lt, stream, spec, seed++);
      }
}

TEST_F(CublasLtMatmul, PlansArePreparedOnce) {
  Context ctx;
  Stream stream;
  CublasLt lt;
  MatmulSpec spec;
  spec.m = 8, spec.n = 16, spec.k = 32;
  run(lt, stream, spec, 100);
  run(lt, stream, spec, 101);
  EXPECT_EQ(lt.prepared_count(), 1u);
  spec.n = 24;
  run(lt, stream, spec, 102);
  EXPECT_EQ(lt.prepared_count(), 2u);
}

TEST(CublasLtSupport, RejectsWhatItCannotRun) {
  std::string why;
  MatmulSpec spec;
  spec.m = spec.n = spec.k = 8;
  EXPECT_TRUE(cublaslt_supports(spec, &why)) << why;
  spec.act = Activation::Silu;
  EXPECT_FALSE(cublaslt_supports(spec, &why));
  EXPECT_NE(why.find("SiLU"), std::string::npos);
  spec.act = Activation::None;
  spec.bias = true;
  spec.d.order = Order::ColMajor;
  EXPECT_FALSE(cublaslt_supports(spec, &why));
  spec.d.order = Order::RowMajor;
  spec.dtype = DType::I32;
  EXPECT_FALSE(cublaslt_supports(spec, &why));
  spec.dtype = DType::BF16;
  spec.tf32 = true;
  EXPECT_FALSE(cublaslt_supports(spec, &why));
}

// The plan's algorithm is the fastest of the heuristic's candidates, timed on scratch
// operands (a skinny product, where the first candidate is often slow): whichever wins
// must compute the same products, with a bias and beta that the scratch run must not
// leave behind in the real output.
TEST_F(CublasLtMatmul, AutotunedPlansComputeTheSameProducts) {
  Context ctx;
  Stream stream;
  // Timed on copies of the operands rotated past the L2, as the runtime's plans are.
  CublasLt lt(size_t{32} << 20, static_cast<size_t>(ctx.info().l2_bytes));
  MatmulSpec spec;
  spec.dtype = DType::BF16;
  spec.m = 64, spec.n = 96, spec.k = 520;
  spec.b.order = Order::ColMajor;
  spec.bias = true;
  run(lt, stream, spec, 300);
  spec.dtype = DType::F32;
  spec.bias = false;
  spec.beta = 0.5f;
  spec.batch = 3;
  spec.a.batch_stride = 64 * 520 + 7;
  run(lt, stream, spec, 301);
  EXPECT_EQ(lt.prepared_count(), 2u);
  EXPECT_GE(lt.autotuned_count(), 1u) << "the heuristic offered one candidate for both shapes";
}
