// RMSNorm and online softmax over rows against a double CPU reference, on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "luminal_cuda/kernels.hpp"
#include "test_util.hpp"

using namespace luminal::cuda;
using namespace luminal::cuda::test_util;
using luminal::DType;

namespace {
class Rows : public ::testing::Test {
 protected:
  void SetUp() override { LUMINAL_REQUIRE_GPU(); }
};

void check_close(const std::vector<double>& got, const std::vector<double>& ref, DType dtype) {
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool ok = std::isnan(ref[i]) ? std::isnan(got[i])
                                       : std::fabs(got[i] - ref[i]) <= tolerance(dtype) * std::max(1e-2, std::fabs(ref[i])) + 1e-6;
    if (!ok && bad++ < 5) ADD_FAILURE() << "element " << i << " = " << got[i] << ", reference " << ref[i];
  }
  EXPECT_EQ(bad, 0);
}
}  // namespace

TEST_F(Rows, RmsNormMatchesReference) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 1;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (auto [rows, cols] : {std::pair{3, 4096}, {5, 77}, {1, 8}, {7, 1000}, {2, 3}, {2, 9000}, {1, 70000}})
      for (bool with_weight : {false, true}) {
        SCOPED_TRACE(::testing::Message() << luminal::dtype_name(dt) << " " << rows << "x" << cols << " weight=" << with_weight);
        const HostData x = encode(dt, random_values(size_t(rows) * cols, seed++, 3.0f));
        const HostData w = encode(dt, random_values(size_t(cols), seed++, 2.0f));
        DeviceBuffer dx = to_device(x, stream.get()), dw = to_device(w, stream.get()), dy(x.bytes.size());
        const float eps = 1e-5f;
        launch_rmsnorm(cache, dt, dx.ptr(), with_weight ? dw.ptr() : 0, dy.ptr(), rows, cols, eps, stream.get());
        std::vector<double> ref(x.values.size());
        for (int r = 0; r < rows; ++r) {
          double squares = 0;
          for (int c = 0; c < cols; ++c) squares += x.values[size_t(r) * cols + c] * x.values[size_t(r) * cols + c];
          const double scale = 1.0 / std::sqrt(squares / cols + eps);
          for (int c = 0; c < cols; ++c)
            ref[size_t(r) * cols + c] = x.values[size_t(r) * cols + c] * scale * (with_weight ? w.values[c] : 1.0);
        }
        check_close(from_device(dy, dt, stream.get()), ref, dt);
      }
}

TEST_F(Rows, SoftmaxMatchesReferenceIncludingMaskedAndLargeValues) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  uint32_t seed = 50;
  const float inf = std::numeric_limits<float>::infinity();
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (auto [rows, cols] : {std::pair{4, 4096}, {3, 77}, {2, 16}, {5, 1000}, {3, 9000}, {3, 70000}}) {
      SCOPED_TRACE(::testing::Message() << luminal::dtype_name(dt) << " " << rows << "x" << cols);
      std::vector<float> values = random_values(size_t(rows) * cols, seed++, 6.0f);
      for (int c = 0; c < cols; c += 3) values[c] = -inf;             // row 0: masked entries
      for (int c = 0; c < cols; ++c) values[size_t(cols) + c] += 60;  // row 1: exp would overflow unshifted
      if (rows > 2)
        for (int c = 0; c < cols; ++c) values[size_t(2) * cols + c] = -inf;  // row 2: all masked -> NaN
      const HostData x = encode(dt, values);
      DeviceBuffer dx = to_device(x, stream.get()), dy(x.bytes.size());
      launch_softmax(cache, dt, dx.ptr(), dy.ptr(), rows, cols, stream.get());
      std::vector<double> ref(x.values.size());
      for (int r = 0; r < rows; ++r) {
        double m = -inf;
        for (int c = 0; c < cols; ++c) m = std::max(m, x.values[size_t(r) * cols + c]);
        double sum = 0;
        for (int c = 0; c < cols; ++c) sum += m == -inf ? 0 : std::exp(x.values[size_t(r) * cols + c] - m);
        for (int c = 0; c < cols; ++c)
          ref[size_t(r) * cols + c] =
              m == -inf ? std::numeric_limits<double>::quiet_NaN() : std::exp(x.values[size_t(r) * cols + c] - m) / sum;
      }
      check_close(from_device(dy, dt, stream.get()), ref, dt);
    }
}

TEST_F(Rows, RejectsEmptyRows) {
  Context ctx;
  Stream stream;
  ModuleCache cache(ctx.info().arch());
  DeviceBuffer buf(64);
  EXPECT_THROW(launch_softmax(cache, DType::F32, buf.ptr(), buf.ptr(), 1, 0, stream.get()), luminal::Error);
  EXPECT_THROW(launch_rmsnorm(cache, DType::I64, buf.ptr(), 0, buf.ptr(), 1, 4, 1e-5f, stream.get()), luminal::Error);
}
