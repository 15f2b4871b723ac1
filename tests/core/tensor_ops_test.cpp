// Indexing, sorting, cumulative, convolution and pooling ops of GraphTensor, run on the
// reference runtime. Expected values were computed with PyTorch and pasted as literals.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "luminal/luminal.hpp"

using namespace luminal;

namespace {
ReferenceRuntime compile(const Graph& cx) { return cx.compile(ReferenceRuntime{}, CompileOptions{}); }

std::vector<float> range_f(int n, float start = 0) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}
// (i * mul) % mod + add for i in [0, n): small exact test data.
std::vector<float> pattern(int n, int mod, float add, int mul = 1) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i * mul % mod) + add;
  return v;
}
void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}
std::vector<int32_t> range_i(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}
}  // namespace

// ---- gather / scatter / index_select / embedding / one_hot ----

TEST(TensorOps, GatherAxis1) {
  Graph cx;
  auto x = cx.tensor({2, 3});
  auto idx = cx.tensor({2, 2}, DType::I64);
  auto y = x.gather(1, idx).output();
  auto rt = compile(cx);
  rt.set_data(x, {1.f, 2.f, 3.f, 4.f, 5.f, 6.f});
  rt.set_data(idx, {0, 0, 2, 1});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(y), (std::vector<float>{1, 1, 6, 5}));
}

TEST(TensorOps, GatherIntTransposedInput) {
  Graph cx;
  auto base = cx.tensor({3, 2}, DType::I32);
  auto idx = cx.tensor({2, 3}, DType::I32);
  auto y = base.t().gather(0, idx).output();  // base.t() = [[0,2,4],[1,3,5]]
  auto rt = compile(cx);
  rt.set_data(base, range_i(6));
  rt.set_data(idx, {1, 0, 1, 0, 0, 1});
  rt.execute(cx.dim_map());
  EXPECT_EQ(y.dtype(), DType::I32);
  EXPECT_EQ(rt.get_i32(y), (std::vector<int32_t>{1, 2, 5, 0, 2, 5}));
}

TEST(TensorOps, GatherSymbolicRows) {
  Graph cx;
  auto seq = Expression::var("seq");
  auto x = cx.tensor({seq, 4});
  auto idx = cx.tensor({seq, 1}, DType::I32);
  auto y = x.gather(-1, idx).output();
  cx.set_dim("seq", 5);
  auto rt = compile(cx);
  rt.set_data(x, range_f(20));
  rt.set_data(idx, {3, 2, 1, 0, 3});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(y), (std::vector<float>{3, 6, 9, 12, 19}));
}

TEST(TensorOps, GatherSymbolicIndexFromStaticTable) {
  Graph cx;
  auto x = cx.tensor({6, 2});
  auto idx = cx.tensor({Expression::var("seq"), 2}, DType::I64);
  auto y = x.gather(0, idx).output();
  auto rt = compile(cx);
  rt.set_data(x, range_f(12));
  rt.set_data(idx, {5, 0, 2, 2, 0, 5});
  rt.execute({{"seq", 3}});
  EXPECT_EQ(rt.get_f32(y), (std::vector<float>{10, 1, 4, 5, 0, 11}));
}

TEST(TensorOps, ScatterUsesLeadingPartOfSrc) {
  Graph cx;
  auto dest = cx.constant(0).expand({3, 5});
  auto idx = cx.tensor({1, 4}, DType::I64);
  auto src = cx.tensor({2, 5});
  auto y = dest.scatter(0, idx, src).output();
  auto rt = compile(cx);
  rt.set_data(idx, {0, 1, 2, 0});
  rt.set_data(src, range_f(10, 1));
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(y), (std::vector<float>{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));
}

TEST(TensorOps, ScatterIntAxis1) {
  Graph cx;
  auto dest = cx.tensor({2, 3}, DType::I64);
  auto idx = cx.tensor({2, 2}, DType::I64);
  auto src = cx.tensor({2, 2}, DType::I64);
  auto y = dest.scatter(1, idx, src).output();
  auto rt = compile(cx);
  rt.set_data(dest, range_i(6));
  rt.set_data(idx, {2, 0, 1, 2});
  rt.set_data(src, {10, 20, 30, 40});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_i64(y), (std::vector<int64_t>{20, 1, 10, 3, 30, 40}));
}

TEST(TensorOps, IndexSelect) {
  Graph cx;
  auto x = cx.tensor({3, 4});
  auto rows = cx.tensor({2}, DType::I32);
  auto cols = cx.tensor({2}, DType::I64);
  auto a = x.index_select(0, rows).output();
  auto b = x.index_select(1, cols).output();
  auto rt = compile(cx);
  rt.set_data(x, range_f(12));
  rt.set_data(rows, {2, 0});
  rt.set_data(cols, {3, 1});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(a), (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3}));
  EXPECT_EQ(rt.get_f32(b), (std::vector<float>{3, 1, 7, 5, 11, 9}));
}

TEST(TensorOps, IndexSelectSymbolic) {
  Graph cx;
  auto x = cx.tensor({Expression::var("seq"), 3});
  auto cols = cx.tensor({2}, DType::I32);
  auto y = x.index_select(1, cols).output();
  auto rt = compile(cx);
  rt.set_data(x, range_f(15));
  rt.set_data(cols, {2, 0});
  rt.execute({{"seq", 5}});
  EXPECT_EQ(rt.get_f32(y), (std::vector<float>{2, 0, 5, 3, 8, 6, 11, 9, 14, 12}));
}

TEST(TensorOps, Embedding) {
  Graph cx;
  auto table = cx.tensor({5, 3});
  auto ids = cx.tensor({2, 2}, DType::I32);
  auto y = table.embedding(ids).output();
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  auto rt = compile(cx);
  rt.set_data(table, range_f(15));
  rt.set_data(ids, {4, 0, 1, 1});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(y), (std::vector<float>{12, 13, 14, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
}

TEST(TensorOps, EmbeddingSymbolicSequence) {
  Graph cx;
  auto table = cx.tensor({5, 3});
  auto ids = cx.tensor({1, Expression::var("seq")}, DType::I64);
  auto y = table.embedding(ids).output();
  cx.set_dim("seq", 5);
  auto rt = compile(cx);
  rt.set_data(table, range_f(15));
  rt.set_data(ids, {2, 4, 0, 1, 3});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(y), (std::vector<float>{6, 7, 8, 12, 13, 14, 0, 1, 2, 3, 4, 5, 9, 10, 11}));
}

TEST(TensorOps, OneHot) {
  Graph cx;
  auto x = cx.tensor({3}, DType::I32);
  auto y = x.one_hot(3).output();
  EXPECT_EQ(y.dtype(), DType::I64);
  auto rt = compile(cx);
  rt.set_data(x, {0, 2, 1});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_i64(y), (std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0}));
}

TEST(TensorOps, IndexingErrors) {
  Graph cx;
  auto x = cx.tensor({2, 3});
  auto idx = cx.tensor({2, 2}, DType::I64);
  EXPECT_THROW(x.gather(2, idx), Error);
  EXPECT_THROW(x.gather(1, cx.tensor({2, 2})), Error);            // float index
  EXPECT_THROW(x.gather(1, cx.tensor({3, 2}, DType::I64)), Error);  // too many rows
  EXPECT_THROW(x.scatter(1, idx, cx.tensor({2, 1})), Error);       // src smaller than index
  EXPECT_THROW(x.scatter(1, idx, cx.tensor({2})), Error);          // rank mismatch
  EXPECT_THROW(x.index_select(0, idx), Error);                     // 2-D index
  EXPECT_THROW(cx.tensor({2, 3, 4}).embedding(idx), Error);
  EXPECT_THROW(x.one_hot(3), Error);
}

// ---- argmax / argmin / cumsum ----

TEST(TensorOps, ArgmaxArgminFirstOccurrenceAndNaN) {
  Graph cx;
  auto x = cx.tensor({3, 4});
  auto amax1 = x.argmax(1).output();
  auto amin1 = x.argmin(-1).output();
  auto amax0 = x.argmax(0, true).output();
  auto amin0 = x.argmin(0).output();
  EXPECT_EQ(amax0.shape(), (Shape{1, 4}));
  EXPECT_EQ(amax1.dtype(), DType::I64);
  auto rt = compile(cx);
  rt.set_data(x, {1.f, 3.f, 3.f, -1.f, 2.f, 2.f, NAN, 5.f, 0.f, -4.f, -4.f, 0.f});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_i64(amax1), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(rt.get_i64(amin1), (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(rt.get_i64(amax0), (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_EQ(rt.get_i64(amin0), (std::vector<int64_t>{2, 2, 1, 0}));
}

TEST(TensorOps, ArgmaxIntAndTransposed) {
  Graph cx;
  auto x = cx.tensor({2, 3}, DType::I32);
  auto a = x.argmax(1).output();
  auto b = x.argmin(0).output();
  auto c = x.t().argmax(0).output();
  auto rt = compile(cx);
  rt.set_data(x, {5, 1, 5, 0, 0, -2});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_i64(a), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(rt.get_i64(b), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(rt.get_i64(c), (std::vector<int64_t>{0, 0}));
}

TEST(TensorOps, Cumsum) {
  Graph cx;
  auto x = cx.tensor({3, 4});
  auto c0 = x.cumsum(0).output();
  auto c1 = x.cumsum(-1).output();
  auto inf = cx.tensor({4});
  auto ci = inf.cumsum(0).output();
  auto rt = compile(cx);
  rt.set_data(x, range_f(12));
  rt.set_data(inf, {1.f, INFINITY, 2.f, -INFINITY});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(c0), (std::vector<float>{0, 1, 2, 3, 4, 6, 8, 10, 12, 15, 18, 21}));
  EXPECT_EQ(rt.get_f32(c1), (std::vector<float>{0, 1, 3, 6, 4, 9, 15, 22, 8, 17, 27, 38}));
  auto r = rt.get_f32(ci);
  EXPECT_EQ(r[0], 1);
  EXPECT_EQ(r[1], INFINITY);
  EXPECT_EQ(r[2], INFINITY);
  EXPECT_TRUE(std::isnan(r[3]));
}

TEST(TensorOps, CumsumIntTransposedIsI64) {
  Graph cx;
  auto x = cx.tensor({2, 3}, DType::I32);
  auto y = x.t().cumsum(1).output();
  EXPECT_EQ(y.dtype(), DType::I64);
  auto rt = compile(cx);
  rt.set_data(x, {1, 2, 3, 4, 5, 6});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_i64(y), (std::vector<int64_t>{1, 5, 2, 7, 3, 9}));
}

TEST(TensorOps, CumsumSymbolic) {
  Graph cx;
  auto x = cx.tensor({Expression::var("seq"), 2});
  auto y = x.cumsum(0).output();
  auto rt = compile(cx);
  rt.set_data(x, range_f(10));
  rt.execute({{"seq", 5}});
  EXPECT_EQ(rt.get_f32(y), (std::vector<float>{0, 1, 2, 4, 6, 9, 12, 16, 20, 25}));
}

TEST(TensorOps, ReduceErrors) {
  Graph cx;
  auto x = cx.tensor({2, 3});
  EXPECT_THROW(x.argmax(2), Error);
  EXPECT_THROW(x.argmin(-3), Error);
  EXPECT_THROW(x.cumsum(5), Error);
}

// ---- argsort / sort / topk ----

TEST(TensorOps, ArgsortStableWithNaN) {
  Graph cx;
  auto x = cx.tensor({2, 6});
  auto up = x.argsort(1).output();
  auto down = x.argsort(-1, true).output();
  auto [vals, idx] = x.sort(1);
  vals = vals.output();
  idx = idx.output();
  auto rt = compile(cx);
  rt.set_data(x, {3.f, 1.f, 2.f, 1.f, NAN, INFINITY, 0.f, -1.f, -1.f, 5.f, 2.f, 0.f});
  rt.execute(cx.dim_map());
  // torch.argsort(stable=True): NaN sorts last ascending, first descending.
  EXPECT_EQ(rt.get_i64(up), (std::vector<int64_t>{1, 3, 2, 0, 5, 4, 1, 2, 0, 5, 4, 3}));
  EXPECT_EQ(rt.get_i64(down), (std::vector<int64_t>{4, 5, 0, 2, 1, 3, 3, 4, 0, 5, 1, 2}));
  EXPECT_EQ(rt.get_i64(idx), rt.get_i64(up));
  auto v = rt.get_f32(vals);
  std::vector<float> expect = {1, 1, 2, 3, INFINITY, NAN, -1, -1, 0, 0, 2, 5};
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(expect[i])) EXPECT_TRUE(std::isnan(v[i])) << i;
    else EXPECT_EQ(v[i], expect[i]) << i;
  }
}

TEST(TensorOps, SortIntAndTransposed) {
  Graph cx;
  auto x = cx.tensor({2, 3}, DType::I32);
  auto a = x.t().argsort(0).output();
  auto [vals, idx] = x.sort(1, true);
  vals = vals.output();
  idx = idx.output();
  auto rt = compile(cx);
  rt.set_data(x, {4, 2, 4, 1, 4, 1});
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_i64(a), (std::vector<int64_t>{1, 0, 0, 2, 2, 1}));
  EXPECT_EQ(vals.dtype(), DType::I32);
  EXPECT_EQ(rt.get_i32(vals), (std::vector<int32_t>{4, 4, 2, 4, 1, 1}));
  EXPECT_EQ(rt.get_i64(idx), (std::vector<int64_t>{0, 2, 1, 1, 0, 2}));
}

TEST(TensorOps, Topk) {
  Graph cx;
  auto x = cx.tensor({2, 6});
  auto [v3, i3] = x.topk(3, 1);
  auto [s2, j2] = x.topk(2, -1, false);
  v3 = v3.output(), i3 = i3.output(), s2 = s2.output(), j2 = j2.output();
  auto xi = cx.tensor({2, 3}, DType::I32);
  auto [vi, ii] = xi.topk(2, 0);
  vi = vi.output(), ii = ii.output();
  auto rt = compile(cx);
  rt.set_data(x, {3.f, 1.f, 2.f, 1.f, NAN, INFINITY, 0.f, -1.f, -1.f, 5.f, 2.f, 0.f});
  rt.set_data(xi, {4, 2, 4, 1, 4, 1});
  rt.execute(cx.dim_map());
  auto v = rt.get_f32(v3);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(std::vector<float>(v.begin() + 1, v.end()), (std::vector<float>{INFINITY, 3, 5, 2, 0}));
  // Ties go to the lower index (torch leaves the order of ties unspecified).
  EXPECT_EQ(rt.get_i64(i3), (std::vector<int64_t>{4, 5, 0, 3, 4, 0}));
  EXPECT_EQ(rt.get_f32(s2), (std::vector<float>{1, 1, -1, -1}));
  EXPECT_EQ(rt.get_i64(j2), (std::vector<int64_t>{1, 3, 1, 2}));
  EXPECT_EQ(rt.get_i32(vi), (std::vector<int32_t>{4, 4, 4, 1, 2, 1}));
  EXPECT_EQ(rt.get_i64(ii), (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
}

TEST(TensorOps, TopkSymbolicLength) {
  Graph cx;
  auto x = cx.tensor({Expression::var("seq")});
  auto [v, i] = x.topk(2);
  v = v.output(), i = i.output();
  auto rt = compile(cx);
  rt.set_data(x, {0.5f, 3.f, -1.f, 7.f, 2.f});
  rt.execute({{"seq", 5}});
  EXPECT_EQ(rt.get_f32(v), (std::vector<float>{7, 3}));
  EXPECT_EQ(rt.get_i64(i), (std::vector<int64_t>{3, 1}));
}

TEST(TensorOps, SortErrors) {
  Graph cx;
  auto x = cx.tensor({2, 3});
  EXPECT_THROW(x.argsort(2), Error);
  EXPECT_THROW(x.topk(4, 1), Error);
  EXPECT_THROW(x.topk(1, -3), Error);
}

// ---- convolution and pooling ----

TEST(TensorOps, Conv2dPaddedWithBias) {
  Graph cx;
  auto x = cx.tensor({1, 2, 4, 4});
  auto w = cx.tensor({3, 2, 3, 3});
  auto b = cx.tensor({3});
  auto y = x.conv2d(w, b, {1, 1}, {1, 1}).output();
  EXPECT_EQ(y.shape(), (Shape{1, 3, 4, 4}));
  auto rt = compile(cx);
  rt.set_data(x, range_f(32));
  rt.set_data(w, pattern(54, 5, -2));
  rt.set_data(b, {1.f, -1.f, 0.5f});
  rt.execute(cx.dim_map());
  expect_near(rt.get_f32(y), {34,   -7,   -6,   -45,  -3,   -24,  -27,  -54,  -7,   -36,  -39,  -66,
                              4,    47,   47,   43,   -31,  -38,  -41,  8,    5,    1,    2,    31,
                              5,    5,    6,    43,   56,   -1,   0,    -47,  32.5, 29.5, 32.5, 39.5,
                              21.5, -5.5, -5.5, -5.5, 25.5, -5.5, -5.5, -9.5, -53.5, -60.5, -63.5, 1.5});
}

TEST(TensorOps, Conv2dStrideDilationGroups) {
  Graph cx;
  auto x = cx.tensor({1, 4, 5, 6});
  auto w = cx.tensor({4, 2, 2, 2});
  auto y = x.conv2d(w, std::nullopt, {2, 2}, {1, 0}, {1, 2}, 2).output();
  EXPECT_EQ(y.shape(), (Shape{1, 4, 3, 2}));
  auto rt = compile(cx);
  rt.set_data(x, pattern(120, 7, -3));
  rt.set_data(w, pattern(32, 3, -1));
  rt.execute(cx.dim_map());
  expect_near(rt.get_f32(y), {-1, -3, 5,  3,  -7, 5,  -3, -1, 2, -5, 2,  2,
                              -3, -3, 11, -8, 2,  11, -5, 7,  -6, -8, 3, -6});
}

TEST(TensorOps, Conv1dTransposedInput) {
  Graph cx;
  auto base = cx.tensor({2, 7, 3});
  auto x = base.transpose(1, 2);  // (2, 3, 7), not contiguous
  auto w = cx.tensor({4, 3, 3});
  auto b = cx.tensor({4});
  auto y = x.conv1d(w, b, 2, 1, 2).output();
  auto dw = cx.tensor({3, 1, 2});
  auto z = x.conv1d(dw, std::nullopt, 1, 0, 1, 3).output();  // depthwise
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(z.shape(), (Shape{2, 3, 6}));
  auto rt = compile(cx);
  rt.set_data(base, pattern(42, 5, -2));
  rt.set_data(w, pattern(36, 4, -1));
  rt.set_data(b, {0.f, 1.f, 2.f, 3.f});
  rt.set_data(dw, {1.f, 2.f, -1.f, 1.f, 0.f, 3.f});
  rt.execute(cx.dim_map());
  expect_near(rt.get_f32(y), {-3, -1, -6, 6, -7, -1, -1, 7, 0, 4, 1, 5, -2, -8, 2, -1, -3, 0, 4, 2, -2, -3, 7, 0});
  expect_near(rt.get_f32(z), {0, -1, 3,  2,  -4, 0,  3, -2, -2, 3,  -2, 3, -6, 3,  -3, 6,  0,  -6,
                              3, 2,  -4, 0,  -1, 3, -2, 3, -2, 3, -2, -2, -3, 6,  0, -6, 3, -3});
}

TEST(TensorOps, Conv1dSymbolicLength) {
  Graph cx;
  auto x = cx.tensor({1, 2, Expression::var("seq")});
  auto w = cx.tensor({2, 2, 3});
  auto y = x.conv1d(w, std::nullopt, 1, 1).output();
  auto rt = compile(cx);
  rt.set_data(x, range_f(10));
  rt.set_data(w, {1.f, 0.f, -1.f, 2.f, 1.f, 0.f, 0.f, 1.f, 0.f, 1.f, 1.f, 1.f});
  rt.execute({{"seq", 5}});
  expect_near(rt.get_f32(y), {4, 14, 17, 20, 28, 11, 19, 23, 27, 21});
}

TEST(TensorOps, MaxPoolPadsWithMinusInfinity) {
  Graph cx;
  auto x = cx.tensor({1, 2, 5, 5});
  auto y = x.max_pool2d({3, 3}, {2, 2}, {1, 1}).output();
  auto a = x.avg_pool2d({3, 3}, {2, 2}, {1, 1}).output();
  EXPECT_EQ(y.shape(), (Shape{1, 2, 3, 3}));
  auto rt = compile(cx);
  rt.set_data(x, pattern(50, 9, -6));
  rt.execute(cx.dim_map());
  expect_near(rt.get_f32(y), {0, 2, 2, 1, 2, 2, 1, 2, 0, 2, 2, 1, 2, 1, 2, -1, 1, 2});
  expect_near(rt.get_f32(a), {-1.33333f, -1, -1, -1, -1, -2, -0.666667f, -1, -1.33333f, -0.222222f, -1.33333f,
                              -0.888889f, -1.33333f, -2, -0.333333f, -1.55556f, -1.33333f, -0.222222f});
}

TEST(TensorOps, PoolIntAndUnbatchedRectangular) {
  Graph cx;
  auto xi = cx.tensor({1, 2, 4, 4}, DType::I32);
  auto m = xi.max_pool2d({2, 2}).output();
  auto x = cx.tensor({2, 5, 5});  // unbatched (C, H, W)
  auto a = x.avg_pool2d({2, 3}, {1, 2}).output();
  EXPECT_EQ(m.dtype(), DType::I32);
  EXPECT_EQ(a.shape(), (Shape{2, 4, 2}));
  auto rt = compile(cx);
  rt.set_data(xi, {-5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1,
                   -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3});
  rt.set_data(x, pattern(50, 9, -6));
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_i32(m), (std::vector<int32_t>{2, 5, 3, 5, 4, 2, 5, 3}));
  expect_near(rt.get_f32(a), {-2.5, -2, -2, -1.5, -1.5, -2.5, -1, -2, -1.5, -2.5, -2.5, -2, -2, -1.5, -3, -1});
}

TEST(TensorOps, ConvAndPoolErrors) {
  Graph cx;
  auto x = cx.tensor({1, 3, 8, 8});
  EXPECT_THROW(x.conv2d(cx.tensor({4, 2, 3, 3}), std::nullopt), Error);                  // channel mismatch
  EXPECT_THROW(x.conv2d(cx.tensor({4, 1, 3, 3}), std::nullopt, {1, 1}, {0, 0}, {1, 1}, 2), Error);  // 3 % 2
  EXPECT_THROW(x.conv2d(cx.tensor({4, 3, 3, 3}), cx.tensor({3})), Error);               // bias size
  EXPECT_THROW(x.conv2d(cx.tensor({4, 3, 9, 9}), std::nullopt), Error);                 // kernel too large
  EXPECT_THROW(x.conv1d(cx.tensor({4, 3, 3}), std::nullopt), Error);                    // rank
  EXPECT_THROW(x.conv2d(cx.tensor({4, 3, 3, 3}), std::nullopt, {0, 1}), Error);         // stride 0
  EXPECT_THROW(x.max_pool2d({2, 2}, {0, 0}, {2, 2}), Error);                           // padding > kernel/2
  EXPECT_THROW(cx.tensor({8, 8}).avg_pool2d({2, 2}), Error);
}
