// The ops of issue 11 item 5 beyond what the op-parity table (tests/python/test_ops.py)
// checks: errors name the user's op, signed zeros come out bit-exact, and the seeded
// random numbers are deterministic and in range.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "luminal/luminal.hpp"

using namespace luminal;

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}
#define EXPECT_ERROR_STARTS(expr, prefix) EXPECT_EQ(error_of([&] { expr; }).rfind(prefix, 0), 0u) << error_of([&] { expr; })

ReferenceRuntime compile(const Graph& cx) { return cx.compile(ReferenceRuntime{}, CompileOptions{}); }

// Equal within 4 ulps, NaN == NaN, and zeros and infinities with their exact sign.
void expect_same(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i << ": " << got[i];
    } else if (want[i] == 0 || std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " element " << i;
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << what << " sign of element " << i;
    } else {
      EXPECT_FLOAT_EQ(got[i], want[i]) << what << " element " << i;
    }
  }
}
}  // namespace

TEST(TensorApiMore, ShapeErrorsNameTheUsersOp) {
  Graph cx;
  auto x = cx.tensor({3, 5});
  EXPECT_ERROR_STARTS(x.glu(1), "glu:");
  EXPECT_ERROR_STARTS(x.kthvalue(6, 1), "kthvalue:");
  EXPECT_ERROR_STARTS(x.quantile(0.5, 1, false, "cubic"), "quantile:");
  EXPECT_ERROR_STARTS(x.quantile(1.5, 1), "quantile:");
  EXPECT_ERROR_STARTS(x.movedim({0, 0}, {0, 1}), "movedim:");
  EXPECT_ERROR_STARTS(x.roll({1, 2}, {0}), "roll:");
  EXPECT_ERROR_STARTS(x.unfold(1, 6, 1), "unfold:");
  EXPECT_ERROR_STARTS(GraphTensor::einsum("ij,jk->ik", {x}), "einsum:");
  EXPECT_ERROR_STARTS(GraphTensor::einsum("ijk->i", {x}), "einsum:");
  EXPECT_ERROR_STARTS(x.cross_entropy(cx.tensor({3}, DType::I64), std::nullopt, -100, "average"), "cross_entropy:");
  EXPECT_ERROR_STARTS(x.index_put({cx.tensor({3}, DType::Bool)}, cx.tensor({3})), "index_put:");
  EXPECT_ERROR_STARTS(x.bitwise_and(x), "bitwise_and:");
  EXPECT_ERROR_STARTS(x.pixel_shuffle(2), "pixel_shuffle:");
  EXPECT_ERROR_STARTS(x.norm(2, {2}), "norm:");
  EXPECT_ERROR_STARTS(x.masked_fill(cx.tensor({3, 5}), 1.0), "masked_fill:");
  auto img = cx.tensor({1, 2, 5, 5});
  EXPECT_ERROR_STARTS(img.conv_transpose(cx.tensor({2, 3, 3, 3}), std::nullopt, {1}, {0}, {1}), "conv_transpose:");
  EXPECT_ERROR_STARTS(img.max_pool({2, 2, 2, 2}), "max_pool:");
  EXPECT_ERROR_STARTS(img.interpolate({4, 4}, "bicubic"), "interpolate:");
  EXPECT_ERROR_STARTS(img.group_norm(3, std::nullopt, std::nullopt), "group_norm:");
  EXPECT_ERROR_STARTS(rand(cx, {3}, 0, DType::I32), "rand:");
}

TEST(TensorApiMore, OutOfRangeIndicesAreRuntimeErrorsNamingTheOp) {
  Graph cx;
  auto x = cx.tensor({3, 4});
  auto idx = cx.tensor({1, 4}, DType::I64);
  auto src = cx.tensor({1, 4});
  auto y = x.scatter_add(0, idx, src).output();
  auto rt = compile(cx);
  rt.set_data(x, std::vector<float>(12, 1.f));
  rt.set_data(idx, std::vector<int64_t>{0, 2, 3, 1});  // 3 is out of range for 3 rows
  rt.set_data(src, std::vector<float>(4, 2.f));
  EXPECT_ERROR_STARTS(rt.execute(cx.dim_map()), "scatter_add:");
  (void)y;

  Graph g2;
  auto logits = g2.tensor({2, 3});
  auto target = g2.tensor({2}, DType::I64);
  auto loss = logits.cross_entropy(target).output();
  auto rt2 = compile(g2);
  rt2.set_data(logits, std::vector<float>(6, 0.5f));
  rt2.set_data(target, std::vector<int64_t>{1, 5});
  EXPECT_ERROR_STARTS(rt2.execute(g2.dim_map()), "cross_entropy:");
  (void)loss;
}

TEST(TensorApiMore, SignedZerosAndQuadrants) {
  Graph cx;
  auto a = cx.tensor({8});
  auto b = cx.tensor({8});
  auto atan2 = a.atan2(b).output();
  auto fmod = a.fmod(b).output();
  auto trunc = a.trunc().output();
  auto log1p = a.log1p().output();
  auto expm1 = a.expm1().output();
  auto asinh = a.asinh().output();
  auto rt = compile(cx);
  const float pi = std::numbers::pi_v<float>, inf = INFINITY;
  rt.set_data(a, {0.f, -0.f, 0.f, -0.f, -0.5f, inf, -inf, -7.5f});
  rt.set_data(b, {-0.f, -0.f, 0.f, 3.f, 2.f, -inf, inf, 2.f});
  rt.execute(cx.dim_map());
  expect_same("atan2", rt.get_f32(atan2), {pi, -pi, 0.f, -0.f, std::atan2(-0.5f, 2.f), 3 * pi / 4, -pi / 4, std::atan2(-7.5f, 2.f)});
  expect_same("fmod", rt.get_f32(fmod), {NAN, NAN, NAN, -0.f, -0.5f, NAN, NAN, -1.5f});
  expect_same("trunc", rt.get_f32(trunc), {0.f, -0.f, 0.f, -0.f, -0.f, inf, -inf, -7.f});
  expect_same("log1p", rt.get_f32(log1p), {0.f, -0.f, 0.f, -0.f, std::log1p(-0.5f), inf, NAN, NAN});
  std::vector<float> e = rt.get_f32(expm1);
  expect_same("expm1", {e[0], e[1], e[5], e[6]}, {0.f, -0.f, inf, -1.f});
  std::vector<float> s = rt.get_f32(asinh);
  expect_same("asinh", {s[0], s[1], s[5], s[6]}, {0.f, -0.f, inf, -inf});
}

TEST(TensorApiMore, RandomNumbersAreSeededAndInRange) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    Graph cx;
    auto a = rand(cx, {64, 33}, 42, dt).cast(DType::F32).output();
    auto b = rand(cx, {64, 33}, 42, dt).cast(DType::F32).output();
    auto c = rand(cx, {64, 33}, 43, dt).cast(DType::F32).output();
    auto n = randn(cx, {1000}, 42, dt).cast(DType::F32).output();
    auto rt = compile(cx);
    rt.execute(cx.dim_map());
    auto va = rt.get_f32(a), vb = rt.get_f32(b), vc = rt.get_f32(c), vn = rt.get_f32(n);
    EXPECT_EQ(va, vb) << dtype_name(dt);
    int equal = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      EXPECT_GE(va[i], 0.f);
      EXPECT_LT(va[i], 1.f) << dtype_name(dt);  // never rounds up to 1 in narrow dtypes
      equal += va[i] == vc[i];
    }
    EXPECT_LT(equal, static_cast<int>(va.size()) / (dt == DType::BF16 ? 50 : 500)) << dtype_name(dt);
    for (float v : vn) EXPECT_TRUE(std::isfinite(v) && std::abs(v) < 7) << v;
  }
}

TEST(TensorApiMore, RandomCounterOffsetShiftsTheStream) {
  Graph cx;
  auto offset = cx.tensor({}, DType::I64);
  auto plain = rand(cx, {4, 50}, 9, DType::F64).output();
  auto shifted = rand(cx, {4, 50}, 9, offset, DType::F64).output();
  auto normal = randn(cx, {4, 50}, 9, offset, DType::F64).output();
  auto rt = compile(cx);
  rt.set_data(offset, std::vector<int64_t>{0});
  rt.execute(cx.dim_map());
  std::vector<float> p = rt.get_f32(plain), at0 = rt.get_f32(shifted), n0 = rt.get_f32(normal);
  EXPECT_EQ(p, at0);  // offset 0 is the plain stream
  rt.set_data(offset, std::vector<int64_t>{int64_t{1} << 32});  // the next call's offset, 2^32 on
  rt.execute(cx.dim_map());
  std::vector<float> at1 = rt.get_f32(shifted), n1 = rt.get_f32(normal);
  int equal = 0;
  for (size_t i = 0; i < at1.size(); ++i) {
    EXPECT_TRUE(at1[i] >= 0.f && at1[i] < 1.f) << at1[i];
    EXPECT_TRUE(std::isfinite(n1[i])) << n1[i];
    equal += (at1[i] == at0[i]) + (n1[i] == n0[i]);
  }
  EXPECT_LT(equal, 3);
  EXPECT_ERROR_STARTS(rand(cx, {3}, 0, cx.tensor({1}, DType::I64)), "rand/randn: offset must be an I64 scalar");
  EXPECT_ERROR_STARTS(randn(cx, {3}, 0, cx.tensor({}, DType::I32)), "rand/randn: offset must be an I64 scalar");
}

TEST(TensorApiMore, Col2imChecksItsSizes) {
  Graph cx;
  EXPECT_ERROR_STARTS(cx.tensor({1, 8, 19}).col2im({5, 6}, {2, 2}), "col2im: input [1, 8, 19] has 19 blocks");
  EXPECT_ERROR_STARTS(cx.tensor({1, 7, 20}).col2im({5, 6}, {2, 2}), "col2im: input [1, 7, 20] dim 1");
  EXPECT_ERROR_STARTS(cx.tensor({1, 9, 1}).col2im({2, 2}, {3, 3}), "col2im: output_size (2, 2) is too small");
  EXPECT_ERROR_STARTS(cx.tensor({1, 4, 20}).col2im({5, 6}, {2, 2}, {1, 1}, {0, 0}, {0, 1}), "col2im: kernel, stride");
  EXPECT_ERROR_STARTS(cx.tensor({2, 1, 4, 20}).col2im({5, 6}, {2, 2}), "col2im: expected an input of rank 3");
}

TEST(TensorApiMore, DropoutIsIdentityAtInference) {
  Graph cx;
  auto x = cx.tensor({5});
  auto y = x.dropout(0.9, false).output();
  auto z = x.dropout(1.0, true).output();
  auto rt = compile(cx);
  rt.set_data(x, {1.f, -2.f, INFINITY, NAN, -0.f});
  rt.execute(cx.dim_map());
  expect_same("dropout eval", rt.get_f32(y), {1.f, -2.f, INFINITY, NAN, -0.f});
  expect_same("dropout p=1", rt.get_f32(z), {0.f, 0.f, 0.f, 0.f, 0.f});
}
