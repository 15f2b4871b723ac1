// The compiled-program cache: exact round trips, malformed entries ignored, and a second
// compile of the same graph loading every segment without saturation or search.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "luminal/luminal.hpp"
#include "luminal/program_cache.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "test_graphs.hpp"

using namespace luminal;
using namespace luminal::testing;

namespace {

std::filesystem::path temp_dir(const std::string& what) {
  auto dir = std::filesystem::temp_directory_path() /
             ("luminal_program_cache_" + what + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// A graph touching every field the format stores: symbolic dims, padded, sliced and
// permuted views, special constants, iota, a persisted state updated by an Output, a
// user op name, and a backend op with every attribute kind.
Graph rich_graph() {
  Graph g;
  Expression seq = Expression::var("seq");
  g.set_dim("seq", 7);
  auto x = g.named_tensor("x", {seq, 6});
  auto state = g.named_tensor("state", {seq, 6}).persist();
  auto y = (x.permute({1, 0}).slice(0, int64_t{1}, int64_t{5}).pad(1, 1, 2).exp() * g.constant(-0.0)).max({1});
  auto nan = g.constant(std::numeric_limits<double>::quiet_NaN());
  auto z = x.softmax(-1) + nan + g.constant(-std::numeric_limits<double>::infinity());
  g.update(state, z);
  y.output();
  g.iota(Expression::index() * 3 % seq, {seq}, DType::I64).output();

  Node op;
  op.op = OpKind::BackendOp;
  op.dtype = DType::BF16;
  op.shape = {seq, 6};
  op.inputs.push_back({x.id(), ShapeTracker::contiguous({seq, 6})});
  op.user_op = "matmul";
  auto call = std::make_shared<BackendOpCall>();
  call->name = "SomeGemm";
  call->attrs = {int64_t{-3}, 2.5, std::string("F32"), seq * 2 + 1, std::vector<Expression>{seq, 4, seq / 2}};
  op.backend = call;
  NodeId b = g.add_node(op);
  Node out;
  out.op = OpKind::Output;
  out.dtype = DType::BF16;
  out.shape = {seq, 6};
  out.inputs.push_back({b, ShapeTracker::contiguous({seq, 6})});
  out.label = "gemm";
  g.add_node(out);
  return g;
}

TEST(ProgramCache, GraphRoundTripIsExact) {
  Graph g = rich_graph();
  auto bytes = serialize_graph(g);
  ASSERT_TRUE(bytes.has_value());
  Graph back = parse_graph(*bytes);
  EXPECT_EQ(search::structural_hash(back), search::structural_hash(g));
  EXPECT_EQ(serialize_graph(back), bytes);
  EXPECT_EQ(back.dim_map(), g.dim_map());
  ASSERT_EQ(back.size(), g.size());
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node &a = g.node(i), &c = back.node(i);
    EXPECT_EQ(a.user_op, c.user_op) << i;
    if (a.op == OpKind::Constant) {  // bit for bit: NaN stays NaN, -0 stays -0
      EXPECT_EQ(std::signbit(a.constant), std::signbit(c.constant)) << i;
      EXPECT_EQ(std::isnan(a.constant), std::isnan(c.constant)) << i;
    }
    if (a.backend) {
      ASSERT_TRUE(c.backend);
      EXPECT_EQ(*a.backend, *c.backend);
    }
  }
}

TEST(ProgramCache, MalformedBytesAreErrorsNeverCrashes) {
  auto bytes = *serialize_graph(rich_graph());
  for (size_t n = 0; n < bytes.size(); n += 7)  // every truncation is reported
    EXPECT_THROW(parse_graph(std::string_view(bytes).substr(0, n)), Error) << "prefix " << n;
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {  // flipped bytes: an error or a valid graph
    std::string bad = bytes;
    bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
    try {
      parse_graph(bad);
    } catch (const Error&) {
    }
  }
}

TEST(ProgramCache, CustomOpsAreNotSerialised) {
  struct Twice : CustomOp {
    std::string name() const override { return "twice"; }
    HostTensor execute_reference(std::span<const HostTensor> in, const std::vector<int64_t>&, DType) const override {
      return in[0];
    }
  };
  Graph g;
  auto x = g.tensor({3});
  g.custom_op(std::make_shared<Twice>(), {x}, {3}, DType::F32).output();
  EXPECT_FALSE(serialize_graph(g).has_value());
}

std::vector<float> run_model(TestModel& m, Runtime& rt) {
  fill_random(rt, m, 3);
  rt.execute(m.cx.dim_map());
  return rt.get_f32(m.outputs[0]);
}

TEST(ProgramCache, SecondCompileLoadsEverySegment) {
  auto dir = temp_dir("compile");
  TestModel m;
  build_transformer_block(m);
  auto options = [&](CompileReport* report) {
    return CompileOptions().program_cache(true).program_cache_dir(dir.string()).search_graph_limit(8)
        .search_time_limit(std::chrono::seconds(20)).report(report);
  };
  CompileReport cold, warm;
  auto first = m.cx.compile(ReferenceRuntime{}, options(&cold));
  EXPECT_EQ(cold.segments_cached, 0);
  EXPECT_GT(cold.segments_compiled, 0);
  EXPECT_FALSE(std::filesystem::is_empty(dir));
  auto second = m.cx.compile(ReferenceRuntime{}, options(&warm));
  EXPECT_EQ(warm.segments_cached, cold.segments_compiled);
  EXPECT_EQ(warm.segments_compiled, 0);
  EXPECT_EQ(warm.candidates, 0);
  EXPECT_EQ(warm.saturate_s, 0);
  EXPECT_EQ(run_model(m, second), run_model(m, first));  // the same program: the same bits

  // Another seed is another search: a miss.
  CompileReport other;
  m.cx.compile(ReferenceRuntime{}, options(&other).seed(9));
  EXPECT_EQ(other.segments_cached, 0);

  // A corrupted entry is ignored and recompiled, never trusted.
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ofstream f(e.path(), std::ios::binary | std::ios::trunc);
    f << "LMPROG2\ngarbage";
  }
  CompileReport again;
  auto third = m.cx.compile(ReferenceRuntime{}, options(&again));
  EXPECT_EQ(again.segments_cached, 0);
  EXPECT_GT(again.segments_compiled, 0);
  EXPECT_EQ(run_model(m, third), run_model(m, first));
  std::filesystem::remove_all(dir);
}

TEST(ProgramCache, OffMeansOff) {
  auto dir = temp_dir("off");
  TestModel m;
  build_mlp(m);
  CompileReport a, b;
  auto opts = CompileOptions().program_cache(false).program_cache_dir(dir.string()).search_graph_limit(4);
  m.cx.compile(ReferenceRuntime{}, CompileOptions(opts).report(&a));
  m.cx.compile(ReferenceRuntime{}, CompileOptions(opts).report(&b));
  EXPECT_EQ(b.segments_cached, 0);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
