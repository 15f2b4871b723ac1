// The memory planner: packing invariants on random interval sets, and lifetimes on
// random programs checked by simulating every write and read over the arena bytes.
#include "luminal/plan/memory_planner.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "luminal/luminal.hpp"

using namespace luminal;
using plan::BufferUse;
using plan::MemoryPlan;

namespace {

int32_t root_of(std::span<const BufferUse> buffers, int32_t i) {
  while (buffers[i].alias_of >= 0) i = buffers[i].alias_of;
  return i;
}

// Everything pack promises, checked directly from the inputs.
void expect_valid_packing(std::span<const BufferUse> buffers, const MemoryPlan& plan, int64_t alignment) {
  ASSERT_EQ(plan.offsets.size(), buffers.size());
  EXPECT_LE(plan.live_peak_bytes, plan.arena_bytes);
  EXPECT_LE(plan.arena_bytes, plan.naive_bytes);
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % alignment, 0) << "buffer " << i;
    EXPECT_GE(plan.offsets[i], 0);
    EXPECT_LE(plan.offsets[i] + buffers[i].bytes, plan.arena_bytes) << "buffer " << i;
    if (buffers[i].alias_of >= 0) {
      EXPECT_EQ(plan.offsets[i], plan.offsets[buffers[i].alias_of]) << "alias " << i << " moved off its storage";
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      const BufferUse& a = buffers[i];
      const BufferUse& b = buffers[j];
      if (a.bytes == 0 || b.bytes == 0) continue;
      if (root_of(buffers, static_cast<int32_t>(i)) == root_of(buffers, static_cast<int32_t>(j))) continue;
      const bool live_together = a.first <= b.last && b.first <= a.last;
      const bool bytes_overlap =
          plan.offsets[i] < plan.offsets[j] + b.bytes && plan.offsets[j] < plan.offsets[i] + a.bytes;
      EXPECT_FALSE(live_together && bytes_overlap) << "buffers " << i << " and " << j << " are live together and overlap";
    }
  }
}

std::vector<BufferUse> random_buffers(std::mt19937& rng, bool with_aliases) {
  const int n = std::uniform_int_distribution<int>(1, 120)(rng);
  const int steps = std::uniform_int_distribution<int>(1, 60)(rng);
  std::vector<BufferUse> buffers;
  for (int i = 0; i < n; ++i) {
    BufferUse b;
    // Mostly small, some huge, some empty, many not multiples of the alignment.
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    b.bytes = kind == 0 ? 0 : kind == 1 ? std::uniform_int_distribution<int64_t>(1 << 20, 1 << 24)(rng)
                                        : std::uniform_int_distribution<int64_t>(1, 5000)(rng);
    b.first = std::uniform_int_distribution<int32_t>(0, steps - 1)(rng);
    b.last = b.first + std::uniform_int_distribution<int32_t>(0, steps / 3)(rng);
    if (with_aliases && i > 0 && kind >= 8) {
      // An in-place op: it starts where an earlier buffer ends and takes its storage.
      b.alias_of = std::uniform_int_distribution<int32_t>(0, i - 1)(rng);
      b.first = buffers[b.alias_of].last;
      b.last = b.first + std::uniform_int_distribution<int32_t>(0, 5)(rng);
    }
    buffers.push_back(b);
  }
  return buffers;
}

}  // namespace

TEST(MemoryPlanner, RandomIntervalsNeverOverlapWhileLive) {
  for (uint32_t seed = 0; seed < 200; ++seed) {
    std::mt19937 rng(seed);
    const bool with_aliases = seed % 2 == 1;
    const std::vector<BufferUse> buffers = random_buffers(rng, with_aliases);
    const int64_t alignment = int64_t{1} << (seed % 8);  // 1 .. 128
    const MemoryPlan plan = plan::pack(buffers, alignment);
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    expect_valid_packing(buffers, plan, alignment);
    if (testing::Test::HasFailure()) return;
  }
}

TEST(MemoryPlanner, DisjointLifetimesShareAndOverlappingOnesDoNot) {
  // Three buffers one after another: one slot, the size of the largest.
  const std::vector<BufferUse> chain = {{100, 0, 1}, {300, 2, 3}, {200, 4, 5}};
  MemoryPlan plan = plan::pack(chain, 64);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(plan.arena_bytes, 320);
  EXPECT_EQ(plan.naive_bytes, 128 + 320 + 256);
  EXPECT_EQ(plan.live_peak_bytes, 320);
  // All live at step 2: nothing can be shared.
  const std::vector<BufferUse> together = {{100, 0, 2}, {300, 2, 3}, {200, 1, 5}};
  plan = plan::pack(together, 64);
  EXPECT_EQ(plan.arena_bytes, plan.naive_bytes);
  EXPECT_EQ(plan.arena_bytes, 128 + 320 + 256);
  expect_valid_packing(together, plan, 64);
  // A lifetime ending at step s and one starting at s are live together (inclusive).
  const std::vector<BufferUse> touching = {{64, 0, 3}, {64, 3, 4}};
  plan = plan::pack(touching, 64);
  EXPECT_NE(plan.offsets[0], plan.offsets[1]);
}

TEST(MemoryPlanner, BestFitTakesTheSmallestHoleThatFits) {
  // Placed largest first: A, B, C, D, E. Once B and D are dead there are two holes,
  // 384 B (B's) and 192 B (D's); F (64 B) must take the smaller one. First fit would
  // take B's hole, which is lower.
  const std::vector<BufferUse> buffers = {
      {512, 0, 9},  // A at 0
      {384, 0, 2},  // B at 512
      {320, 0, 9},  // C at 896
      {192, 0, 2},  // D at 1216
      {128, 0, 9},  // E at 1408
      {64, 5, 9},   // F
  };
  const MemoryPlan plan = plan::pack(buffers, 64);
  expect_valid_packing(buffers, plan, 64);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 512, 896, 1216, 1408, 1216}));
  EXPECT_EQ(plan.arena_bytes, 1536);
}

TEST(MemoryPlanner, AliasesShareStorageOverTheUnionOfLifetimes) {
  // 1 writes in place over 0; 2 lives across both and must avoid the whole group; 3 runs
  // after the group died and may take its bytes.
  const std::vector<BufferUse> buffers = {{512, 0, 2}, {512, 2, 6, 0}, {64, 1, 5}, {512, 7, 8}};
  const MemoryPlan plan = plan::pack(buffers, 64);
  expect_valid_packing(buffers, plan, 64);
  EXPECT_EQ(plan.offsets[1], plan.offsets[0]);
  EXPECT_EQ(plan.offsets[3], plan.offsets[0]);
  EXPECT_EQ(plan.naive_bytes, 512 + 64 + 512);
  EXPECT_EQ(plan.arena_bytes, 576);
  // A chain of aliases resolves to the root; a larger alias grows the root's slot.
  const std::vector<BufferUse> chain = {{64, 0, 1}, {64, 1, 2, 0}, {200, 2, 3, 1}, {64, 0, 3}};
  const MemoryPlan chained = plan::pack(chain, 64);
  expect_valid_packing(chain, chained, 64);
  EXPECT_EQ(chained.offsets[2], chained.offsets[0]);
  EXPECT_EQ(chained.arena_bytes, 256 + 64);
}

TEST(MemoryPlanner, RejectsBadInput) {
  EXPECT_THROW(plan::pack(std::vector<BufferUse>{{-1, 0, 0}}), Error);
  EXPECT_THROW(plan::pack(std::vector<BufferUse>{{8, 3, 2}}), Error);
  EXPECT_THROW(plan::pack(std::vector<BufferUse>{{8, 0, 1, 0}}), Error);            // itself
  EXPECT_THROW(plan::pack(std::vector<BufferUse>{{8, 0, 1, 5}}), Error);            // out of range
  EXPECT_THROW(plan::pack(std::vector<BufferUse>{{8, 0, 1, 1}, {8, 0, 1, 0}}), Error);  // cycle
  EXPECT_THROW(plan::pack(std::vector<BufferUse>{{8, 0, 1}}, 48), Error);            // not a power of two
  EXPECT_THROW(plan::pack(std::vector<BufferUse>{{8, 0, 1}}, 0), Error);
  const MemoryPlan empty = plan::pack(std::vector<BufferUse>{});
  EXPECT_EQ(empty.arena_bytes, 0);
  EXPECT_EQ(empty.naive_bytes, 0);
}

TEST(MemoryPlanner, OutputReusesTheSpaceOfAnIntermediateDeadBeforeIt) {
  // x -> a -> b -> c -> out, all 4 KiB. a is dead once b is written, so out (written
  // last, live to the end) can take a's bytes: two slots. Appending outputs after the
  // intermediates would need three.
  Graph g;
  auto x = g.tensor({1024});
  auto a = x.exp2();
  auto b = a.sin();
  auto c = b.sqrt();
  auto out = c.output();
  const MemoryPlan plan = plan::plan_program(g, {}, [](NodeId) { return true; });
  EXPECT_EQ(plan.offsets[x.id()], plan::kNotInArena);
  EXPECT_EQ(plan.naive_bytes, 4 * 4096);
  EXPECT_EQ(plan.arena_bytes, 2 * 4096);
  const int64_t out_offset = plan.offsets[out.id()];
  EXPECT_TRUE(out_offset == plan.offsets[a.id()] || out_offset == plan.offsets[b.id()]);
  EXPECT_NE(out_offset, plan.offsets[c.id()]);  // c is read while out is written
}

TEST(MemoryPlanner, OutputsLiveToTheEnd) {
  // out1 is written early; everything after it must avoid its bytes.
  Graph g;
  auto x = g.tensor({256});
  auto out1 = x.exp2().output();
  auto y = x.sin();
  auto z = y.sqrt();
  auto out2 = z.output();
  const plan::ProgramBuffers buffers = plan::program_buffers(g, {}, [](NodeId) { return true; });
  const int32_t last_step = static_cast<int32_t>(g.size() - 1);
  for (size_t i = 0; i < buffers.nodes.size(); ++i) {
    if (buffers.nodes[i] == out1.id() || buffers.nodes[i] == out2.id()) {
      EXPECT_EQ(buffers.uses[i].last, last_step);
    }
  }
  const MemoryPlan plan = plan::plan_program(g, {}, [](NodeId) { return true; });
  for (NodeId id : {y.id(), z.id(), out2.id()}) EXPECT_NE(plan.offsets[id], plan.offsets[out1.id()]);
}

TEST(MemoryPlanner, SymbolicDimsUseTheUpperValue) {
  Graph g;
  auto x = g.tensor({Expression::var("seq"), 16});
  auto y = (x * 2.0).sum({1}).output();
  (void)y;
  const plan::ProgramBuffers buffers = plan::program_buffers(g, {{"seq", 33}}, [](NodeId) { return true; });
  int64_t largest = 0;
  for (const BufferUse& use : buffers.uses) largest = std::max(largest, use.bytes);
  EXPECT_EQ(largest, 33 * 16 * 4);
  EXPECT_THROW(plan::plan_program(g, {}, [](NodeId) { return true; }), Error);
}

namespace {

// A random program over tensors of shape [seq, w] and reductions of them; returns the
// Output ids.
std::vector<NodeId> random_program(Graph& g, std::mt19937& rng) {
  const Expression seq = Expression::var("seq");
  std::vector<GraphTensor> pool;
  const int inputs = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int i = 0; i < inputs; ++i) pool.push_back(g.tensor({seq, 8}, i == 2 ? DType::F16 : DType::F32));
  std::vector<NodeId> outputs;
  const int ops = std::uniform_int_distribution<int>(3, 40)(rng);
  for (int k = 0; k < ops; ++k) {
    auto pick = [&] {
      // Favour recent tensors so chains form, but reach back sometimes for long lifetimes.
      const size_t n = pool.size();
      const size_t back = std::min<size_t>(n - 1, std::geometric_distribution<size_t>(0.4)(rng));
      return pool[n - 1 - back];
    };
    GraphTensor t;
    switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
      case 0: t = pick().exp2(); break;
      case 1: t = pick().sin(); break;
      case 2: t = pick() + pick(); break;
      case 3: t = pick() * pick(); break;
      case 4: t = pick().sum({1}, true); break;  // [seq, 1], broadcasts back
      default: t = pick().relu(); break;
    }
    pool.push_back(t);
    if (std::uniform_int_distribution<int>(0, 5)(rng) == 0) outputs.push_back(t.output().id());
  }
  outputs.push_back(pool.back().output().id());
  return outputs;
}

// Buffers read when node `id` runs: its inputs' buffers, looking through fused nodes.
void reads_of(const Graph& g, NodeId id, const std::vector<int64_t>& offsets, std::vector<NodeId>& out) {
  for (const NodeInput& in : g.node(id).inputs) {
    if (g.node(in.node).op == OpKind::Input) continue;
    if (offsets[in.node] != plan::kNotInArena) {
      out.push_back(in.node);
    } else {
      reads_of(g, in.node, offsets, out);
    }
  }
}

}  // namespace

TEST(MemoryPlanner, RandomProgramsSurviveASimulatedExecution) {
  // Execute the plan byte by byte: each arena node stamps its id over its bytes when it
  // runs; before that, every buffer it reads must still carry its producer's stamp; at
  // the end, every output must. Any lifetime cut short shows up as a clobbered stamp.
  for (uint32_t seed = 0; seed < 150; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    Graph g;
    const std::vector<NodeId> outputs = random_program(g, rng);
    std::vector<bool> materialised(g.size());
    const bool fuse_some = seed % 3 != 0;
    for (auto&& m : materialised) m = !fuse_some || std::uniform_int_distribution<int>(0, 2)(rng) != 0;
    const DimMap upper = {{"seq", std::uniform_int_distribution<int64_t>(1, 9)(rng)}};
    const int64_t alignment = seed % 2 == 0 ? 64 : 16;
    // Half the seeds let every node run in place wherever the planner allows it.
    plan::InPlace in_place;
    if (seed % 4 >= 2) in_place = [](NodeId, NodeId) { return true; };
    const MemoryPlan plan =
        plan::plan_program(g, upper, [&](NodeId id) { return bool(materialised[id]); }, alignment, in_place);
    ASSERT_EQ(plan.offsets.size(), g.size());
    EXPECT_LE(plan.live_peak_bytes, plan.arena_bytes);
    EXPECT_LE(plan.arena_bytes, plan.naive_bytes);

    const plan::ProgramBuffers buffers =
        plan::program_buffers(g, upper, [&](NodeId id) { return bool(materialised[id]); }, in_place);
    std::vector<int64_t> bytes(g.size(), 0);
    for (size_t i = 0; i < buffers.nodes.size(); ++i) bytes[buffers.nodes[i]] = buffers.uses[i].bytes;

    std::vector<int64_t> stamp(static_cast<size_t>(plan.arena_bytes), -1);
    auto expect_intact = [&](NodeId producer, NodeId at) {
      for (int64_t b = plan.offsets[producer]; b < plan.offsets[producer] + bytes[producer]; ++b) {
        if (stamp[b] != producer) {
          ADD_FAILURE() << "node " << producer << " was overwritten by node " << stamp[b] << " before node " << at
                        << " read it";
          return;
        }
      }
    };
    for (NodeId id = 0; id < g.size(); ++id) {
      const Node& node = g.node(id);
      if (node.op == OpKind::Input) {
        EXPECT_EQ(plan.offsets[id], plan::kNotInArena);
        continue;
      }
      if (plan.offsets[id] == plan::kNotInArena) {
        EXPECT_FALSE(materialised[id] || node.op == OpKind::Output);
        continue;
      }
      EXPECT_EQ(plan.offsets[id] % alignment, 0);
      std::vector<NodeId> reads;
      reads_of(g, id, plan.offsets, reads);
      for (NodeId r : reads) expect_intact(r, id);
      for (int64_t b = plan.offsets[id]; b < plan.offsets[id] + bytes[id]; ++b) stamp[b] = id;
    }
    for (NodeId out : outputs) expect_intact(out, static_cast<NodeId>(g.size()));
    if (testing::Test::HasFailure()) return;
  }
}

TEST(MemoryPlanner, InPlaceOpsTakeOverTheirInputsLastRead) {
  // x -> a -> b -> c -> out, each the only reader of the previous: in place, the whole
  // chain lives in one slot (two without in-place, see the test above).
  Graph g;
  auto x = g.tensor({1024});
  auto a = x.exp2();
  auto b = a.sin();
  auto c = b.sqrt();
  auto out = c.output();
  const auto all = [](NodeId) { return true; };
  const auto always = [](NodeId, NodeId) { return true; };
  const MemoryPlan plan = plan::plan_program(g, {}, all, 64, always);
  EXPECT_EQ(plan.arena_bytes, 4096);
  EXPECT_EQ(plan.naive_bytes, 4096);
  for (NodeId id : {b.id(), c.id(), out.id()}) EXPECT_EQ(plan.offsets[id], plan.offsets[a.id()]);
  // The callback can refuse.
  const MemoryPlan refused = plan::plan_program(g, {}, all, 64, [&](NodeId node, NodeId) { return node != c.id(); });
  EXPECT_EQ(refused.arena_bytes, 2 * 4096);
}

TEST(MemoryPlanner, InPlaceNeedsTheLastReaderAndNoOutput) {
  Graph g;
  auto x = g.tensor({256});
  auto y = x.exp2();
  auto z = y.sin();     // y is read again below: z may not overwrite it
  auto w = (z + y).output();
  auto v = w.sqrt();    // w is an Output: v, the last step and so its last reader, may not overwrite it
  const auto all = [](NodeId) { return true; };
  const auto always = [](NodeId, NodeId) { return true; };
  const plan::ProgramBuffers buffers = plan::program_buffers(g, {}, all, always);
  std::map<NodeId, int32_t> alias;  // node -> node whose buffer it took over
  for (size_t i = 0; i < buffers.nodes.size(); ++i) {
    if (buffers.uses[i].alias_of >= 0) alias[buffers.nodes[i]] = static_cast<int32_t>(buffers.nodes[buffers.uses[i].alias_of]);
  }
  EXPECT_EQ(alias.count(z.id()), 0u);
  EXPECT_EQ(alias.count(v.id()), 0u);
  EXPECT_EQ(v.id(), g.size() - 1);
  // No buffer hosts two in-place successors.
  std::map<int32_t, int> hosted;
  for (auto [node, host] : alias) EXPECT_EQ(++hosted[host], 1) << "buffer of node " << host;
  const MemoryPlan plan = plan::plan_program(g, {}, all, 64, always);
  EXPECT_NE(plan.offsets[z.id()], plan.offsets[y.id()]);
  EXPECT_NE(plan.offsets[v.id()], plan.offsets[w.id()]);
}

TEST(MemoryPlanner, SummaryReportsTheNumbers) {
  const std::vector<BufferUse> buffers = {{1 << 20, 0, 1}, {1 << 20, 2, 3}};
  const std::string line = plan::summary(plan::pack(buffers));
  EXPECT_EQ(line, "arena 1.00 MiB (naive 2.00 MiB, live peak 1.00 MiB, 50.0% of naive)");
}
