#include <gtest/gtest.h>

#include <random>

#include "luminal/luminal.hpp"
#include "luminal/search/segments.hpp"

using namespace luminal;

namespace {
// A residual MLP stack: x -> [x + relu(x @ W_l^T + b_l)] * layers -> sum.
struct Stack {
  Graph cx;
  GraphTensor x, out;
  std::vector<GraphTensor> weights;
  explicit Stack(int layers, int width = 8) {
    x = cx.named_tensor("x", {Expression::var("batch"), width});
    GraphTensor h = x;
    for (int l = 0; l < layers; ++l) {
      auto w = cx.named_tensor("layers." + std::to_string(l) + ".w", {width, width}).persist();
      auto b = cx.named_tensor("layers." + std::to_string(l) + ".b", {width}).persist();
      weights.push_back(w);
      weights.push_back(b);
      h = h + h.linear(w, b).relu();
    }
    out = h.sum({1}).output();
  }
};

template <class Rt>
void fill(Rt& rt, Stack& s, int batch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (auto& w : s.weights) {
    std::vector<float> v(static_cast<size_t>(w.numel().eval({})));
    for (auto& f : v) f = u(rng);
    rt.set_data(w, v);
  }
  std::vector<float> xv(static_cast<size_t>(batch * 8));
  for (auto& f : xv) f = u(rng);
  rt.set_data(s.x, xv);
}
}  // namespace

TEST(RepeatedBlock, FindsLayers) {
  Stack s(6);
  auto block = search::find_repeated_block(s.cx);
  ASSERT_TRUE(block.has_value());
  EXPECT_EQ(block->count, 6);
  Stack one(1);
  // A layer's nodes: the period is the node count of one layer.
  Stack two(2);
  EXPECT_EQ(block->period, two.cx.size() - one.cx.size());
}

TEST(RepeatedBlock, StitchedProgramMatchesDirect) {
  Stack s(5);
  auto block = search::find_repeated_block(s.cx);
  ASSERT_TRUE(block.has_value());
  int compiled = 0;
  auto identity = [&](const Graph& seg) {
    ++compiled;
    search::SegmentProgram p{seg, {}};
    for (NodeId i = 0; i < seg.size(); ++i) p.io_of.push_back(i);
    return p;
  };
  auto [program, external] = search::compile_by_segments(s.cx, identity, block);
  EXPECT_LE(compiled, 3);  // prefix, one block, suffix
  ReferenceRuntime stitched, direct;
  stitched.load(program, external);
  direct = s.cx.compile(ReferenceRuntime{}, CompileOptions{});
  fill(stitched, s, 3);
  fill(direct, s, 3);
  stitched.execute({{"batch", 3}});
  direct.execute({{"batch", 3}});
  EXPECT_EQ(stitched.get_f32(s.out), direct.get_f32(s.out));
}
