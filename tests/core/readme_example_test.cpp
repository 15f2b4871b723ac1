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
