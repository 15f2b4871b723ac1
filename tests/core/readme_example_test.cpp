// The README's usage example, verbatim in flow.
#include <gtest/gtest.h>

#include "luminal/luminal.hpp"

TEST(ReadmeExample, MatmulOfColumnAndRow) {
  luminal::Graph cx;
  auto a = cx.tensor({3, 1});
  auto b = cx.tensor({1, 4});
  auto c = a.matmul(b).output();
  auto rt = cx.compile(luminal::ReferenceRuntime{}, luminal::CompileOptions{});
  rt.set_data(a, {1.f, 2.f, 3.f});
  rt.set_data(b, {1.f, 2.f, 3.f, 4.f});
  rt.execute(cx.dim_map());
  std::vector<float> out = rt.get_f32(c);
  std::vector<float> expect = {1, 2, 3, 4, 2, 4, 6, 8, 3, 6, 9, 12};
  EXPECT_EQ(out, expect);
}

TEST(Runtime, PersistedStateUpdatesAcrossExecutions) {
  luminal::Graph cx;
  auto counter = cx.named_tensor("counter", {2});
  auto step = cx.tensor({2});
  auto next = cx.update(counter, counter + step);
  auto rt = cx.compile(luminal::ReferenceRuntime{}, luminal::CompileOptions{});
  rt.set_data(counter, {0.f, 10.f});
  for (int i = 0; i < 3; ++i) {
    rt.set_data(step, {1.f, 2.f});
    rt.execute(cx.dim_map());
  }
  EXPECT_EQ(rt.get_f32(counter), (std::vector<float>{3.f, 16.f}));
  EXPECT_EQ(rt.get_f32(next), (std::vector<float>{3.f, 16.f}));
  // The non-persisted input was consumed by the last execute.
  EXPECT_THROW(rt.execute(cx.dim_map()), luminal::Error);
}

TEST(Runtime, DynamicDimsResolveAtExecute) {
  luminal::Graph cx;
  auto seq = luminal::Expression::var("seq");
  auto x = cx.tensor({seq, 2});
  auto y = x.sum({0}).output();
  auto rt = cx.compile(luminal::ReferenceRuntime{}, luminal::CompileOptions{});
  for (int n : {1, 3}) {
    // Rows [k - 1.5, -2k]: column sums differ per column and per n, so a wrong layout shows.
    std::vector<float> data;
    float col0 = 0, col1 = 0;
    for (int k = 0; k < n; ++k) {
      data.push_back(k - 1.5f);
      data.push_back(-2.f * k);
      col0 += k - 1.5f;
      col1 += -2.f * k;
    }
    rt.set_data(x, data);
    rt.execute({{"seq", n}});
    EXPECT_EQ(rt.get_f32(y), (std::vector<float>{col0, col1}));
  }
  rt.set_data(x, {1.f, 2.f});
  EXPECT_THROW(rt.execute({}), luminal::Error);  // unknown dim at execute time
}
