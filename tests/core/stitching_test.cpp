// Segmented compilation (repeated layers searched once, programs stitched) against the
// unsegmented graph run directly on the reference interpreter: no search, no stitching.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "luminal/luminal.hpp"
#include "luminal/search/segments.hpp"

using namespace luminal;

namespace {

// A residual stack with a symbolic batch: x -> [x + relu(x W_l^T + b_l) * s_l] * layers,
// then a softmax and a sum, so every layer's output matters downstream.
struct Stack {
  Graph cx;
  GraphTensor x, out, probs;
  std::vector<GraphTensor> inputs;
  explicit Stack(int layers, int width = 6) {
    x = cx.named_tensor("x", {Expression::var("batch"), width});
    inputs.push_back(x);
    GraphTensor h = x;
    for (int l = 0; l < layers; ++l) {
      auto w = cx.named_tensor("layers." + std::to_string(l) + ".w", {width, width}).persist();
      auto b = cx.named_tensor("layers." + std::to_string(l) + ".b", {width}).persist();
      auto s = cx.named_tensor("layers." + std::to_string(l) + ".s", {1}).persist();
      inputs.insert(inputs.end(), {w, b, s});
      h = h + h.linear(w, b).relu() * s;
    }
    probs = h.softmax(1).output();
    out = h.sum({1}).output();
  }
};

std::vector<float> values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  std::vector<float> v(n);
  for (auto& f : v) f = u(rng);
  return v;
}

// Inputs fill both runtimes with the same non-uniform values (negatives included).
void fill(Runtime& a, Runtime& b, const Stack& s, const DimMap& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  for (const auto& t : s.inputs) {
    auto v = values(static_cast<size_t>(t.numel().eval(dims)), rng);
    a.set_data(t, v);
    b.set_data(t, v);
  }
}

ReferenceRuntime load_direct(const Graph& g) {
  ReferenceRuntime rt;
  std::vector<NodeId> ids(g.size());
  for (NodeId i = 0; i < g.size(); ++i) ids[i] = i;
  rt.load(g, ids);
  return rt;
}

void expect_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
}

}  // namespace

TEST(Stitching, CompiledSegmentsMatchTheUnsegmentedGraph) {
  for (int layers : {3, 5}) {
    Stack s(layers);
    ASSERT_TRUE(search::find_repeated_block(s.cx).has_value()) << layers << " layers";
    s.cx.set_dim("batch", 3);  // a value at compile time, so the search profiles candidates
    CompileReport report;
    // commute adds choices at every Add and Mul, so the search has candidates to pick from.
    auto compiled = s.cx.compile(ReferenceRuntime{}, CompileOptions().trials(1).rulesets({"core", "commute"}).search_graph_limit(6).report(&report));
    EXPECT_GT(report.block_copies, 1) << "the stack should be compiled as repeated segments";
    EXPECT_GT(report.candidates, 0) << report.to_string();
    auto direct = load_direct(s.cx);
    for (int batch : {1, 3, 4}) {
      DimMap dims = {{"batch", batch}};
      fill(compiled, direct, s, dims, 11u + static_cast<uint32_t>(batch));
      compiled.execute(dims);
      direct.execute(dims);
      expect_equal(compiled.get_f32(s.out), direct.get_f32(s.out), "sum");
      expect_equal(compiled.get_f32(s.probs), direct.get_f32(s.probs), "softmax");
    }
  }
}

TEST(Stitching, StitchedIdentityProgramsMatchTheUnsegmentedGraph) {
  // Stitching alone: every segment's program is the segment itself.
  Stack s(4);
  auto block = search::find_repeated_block(s.cx);
  ASSERT_TRUE(block.has_value());
  auto identity = [](const Graph& seg) {
    search::SegmentProgram p{seg, {}};
    for (NodeId i = 0; i < seg.size(); ++i) p.io_of.push_back(i);
    return p;
  };
  auto [program, external] = search::compile_by_segments(s.cx, identity, block);
  ReferenceRuntime stitched;
  stitched.load(program, external);
  auto direct = load_direct(s.cx);
  DimMap dims = {{"batch", 3}};
  fill(stitched, direct, s, dims, 5);
  stitched.execute(dims);
  direct.execute(dims);
  expect_equal(stitched.get_f32(s.out), direct.get_f32(s.out), "sum");
  expect_equal(stitched.get_f32(s.probs), direct.get_f32(s.probs), "softmax");
}

// A layer's weights made before the layer's first node (here: in the middle of the layer
// before it), so that they fall in an earlier segment's range. No segment may export a
// graph input (an 8B model's layer exported its MLP weights, 350 MB read back per
// verification); each segment reading one holds it as an Input, the stitched program holds
// it once, and the values match the unsegmented graph.
TEST(Stitching, GraphInputsAreReadWhereUsedNotExported) {
  Graph cx;
  const int width = 5, layers = 4;
  auto x = cx.named_tensor("x", {Expression::var("batch"), width});
  std::vector<GraphTensor> inputs{x};
  auto weights = [&](int l) {
    auto w = cx.named_tensor("layers." + std::to_string(l) + ".w", {width, width}).persist();
    auto b = cx.named_tensor("layers." + std::to_string(l) + ".b", {width}).persist();
    inputs.insert(inputs.end(), {w, b});
    return std::pair{w, b};
  };
  auto wb = weights(0);
  GraphTensor h = x;
  for (int l = 0; l < layers; ++l) {
    auto y = h.linear(wb.first, wb.second).relu();
    if (l + 1 < layers) wb = weights(l + 1);  // the next layer's weights, made inside this one
    h = h + y * 0.5;
  }
  auto out = h.sum({1}).output();
  auto block = search::find_repeated_block(cx);
  ASSERT_TRUE(block.has_value());
  int segments = 0, exported_inputs = 0, segments_reading_inputs_from_before = 0;
  auto identity = [&](const Graph& seg) {
    ++segments;
    bool reads_early_input = false;
    for (NodeId i = 0; i < seg.size(); ++i) {
      const Node& n = seg.node(i);
      if (n.op == OpKind::Output && seg.node(n.inputs[0].node).op == OpKind::Input) ++exported_inputs;
      if (n.op == OpKind::Input && n.label.rfind("layers.", 0) == 0 && n.persist) reads_early_input = true;
    }
    segments_reading_inputs_from_before += reads_early_input;
    search::SegmentProgram p{seg, {}};
    for (NodeId i = 0; i < seg.size(); ++i) p.io_of.push_back(i);
    return p;
  };
  auto [program, external] = search::compile_by_segments(cx, identity, block);
  EXPECT_GE(segments, 3);
  EXPECT_EQ(exported_inputs, 0);
  EXPECT_GE(segments_reading_inputs_from_before, 2);
  // Each graph input appears once in the stitched program.
  std::map<NodeId, int> copies;
  for (NodeId i = 0; i < program.size(); ++i)
    if (program.node(i).op == OpKind::Input) ++copies[external[i]];
  for (const auto& [original, count] : copies) EXPECT_EQ(count, 1) << "input " << original;
  EXPECT_EQ(copies.size(), inputs.size());
  auto direct = load_direct(cx);
  const DimMap dims = {{"batch", 3}};
  std::mt19937 rng(7);
  auto against_direct = [&](Runtime& rt, const char* what) {  // same fresh values in both
    for (const auto& t : inputs) {
      auto v = values(static_cast<size_t>(t.numel().eval(dims)), rng);
      rt.set_data(t, v);
      direct.set_data(t, v);
    }
    rt.execute(dims);
    direct.execute(dims);
    expect_equal(rt.get_f32(out), direct.get_f32(out), what);
  };
  ReferenceRuntime stitched;
  stitched.load(program, external);
  against_direct(stitched, "sum");
  // And through a real compile (search, verification) on the reference runtime.
  cx.set_dim("batch", 3);
  CompileReport report;
  auto compiled = cx.compile(ReferenceRuntime{}, CompileOptions().trials(1).search_graph_limit(4).report(&report));
  EXPECT_GT(report.block_copies, 1) << report.to_string();
  against_direct(compiled, "compiled sum");
}
