#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>

#include "luminal/luminal.hpp"
#include "luminal/search/genetic.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "test_graphs.hpp"

using namespace luminal;
using namespace luminal::testing;

namespace {

std::vector<std::vector<float>> run_direct(TestModel& m) {
  ReferenceRuntime rt;
  std::vector<NodeId> ids(m.cx.size());
  for (NodeId i = 0; i < ids.size(); ++i) ids[i] = i;
  rt.load(m.cx, ids);
  fill_random(rt, m);
  rt.execute(m.cx.dim_map());
  std::vector<std::vector<float>> outs;
  for (auto& o : m.outputs) outs.push_back(rt.get_f32(o));
  return outs;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << what << " element " << i;
}

// Every random extraction of the saturated e-graph must compute what the graph does.
void fuzz_genomes(TestModel& m, int candidates) {
  auto expect = run_direct(m);
  search::LoweredGraph lowered = search::lower_to_egraph(m.cx);
  for (const auto& f : search::core_rule_files()) lowered.egraph->load_file(f);
  lowered.egraph->run(egraph::Schedule::saturate({egraph::Schedule::run("core"), egraph::Schedule::run("commute")}));
  search::ChoiceSpace space = search::choice_space(lowered);
  ASSERT_GT(space.slots.size(), 4u) << "the e-graph should offer choices";
  std::mt19937_64 rng(42);
  int ran = 0;
  for (int c = 0; c < candidates; ++c) {
    search::Genome g(space.slots.size());
    for (size_t s = 0; s < g.size(); ++s) g[s] = static_cast<uint32_t>(rng() % space.options[s].size());
    auto program = search::extract(lowered, space, g);
    if (!program) continue;  // a cyclic choice is rejected, never executed
    ReferenceRuntime rt;
    rt.load(program->program, program->io_of);
    fill_random(rt, m);
    rt.execute(m.cx.dim_map());
    for (size_t o = 0; o < m.outputs.size(); ++o)
      expect_close(rt.get_f32(m.outputs[o]), expect[o], 1e-4f, "candidate " + std::to_string(c));
    ++ran;
  }
  EXPECT_GE(ran, candidates * 9 / 10);
}

}  // namespace

TEST(GenomeFuzz, Mlp) {
  TestModel m;
  build_mlp(m);
  fuzz_genomes(m, 200);
}

TEST(GenomeFuzz, AttentionBlock) {
  TestModel m;
  build_attention(m);
  fuzz_genomes(m, 200);
}

TEST(GenomeFuzz, TransformerBlock) {
  TestModel m;
  build_transformer_block(m);
  fuzz_genomes(m, 200);
}

TEST(Search, CompiledModelMatchesDirectAndIsDeterministic) {
  TestModel m;
  build_transformer_block(m);
  auto expect = run_direct(m);
  auto opts = CompileOptions().rulesets({"core", "commute"}).search_graph_limit(12).seed(3).trials(1);
  CompileReport r1, r2;
  auto rt = m.cx.compile(ReferenceRuntime{}, CompileOptions(opts).report(&r1));
  fill_random(rt, m);
  rt.execute(m.cx.dim_map());
  expect_close(rt.get_f32(m.outputs[0]), expect[0], 1e-4f, "compiled");
  EXPECT_GT(r1.choice_slots, 0);
  EXPECT_EQ(r1.candidates, 12);
  m.cx.compile(ReferenceRuntime{}, CompileOptions(opts).report(&r2));
  EXPECT_EQ(r1.choice_slots, r2.choice_slots);
  EXPECT_EQ(r1.egraph_nodes, r2.egraph_nodes);
}

TEST(Search, IdentitiesAreRemoved) {
  // x * 1 + 0 offers a cheaper program without the Mul and Add.
  Graph cx;
  auto x = cx.tensor({64});
  auto y = (x * 1.0 + 0.0).exp2().output();
  CompileReport r;
  auto rt = cx.compile(ReferenceRuntime{}, CompileOptions().report(&r).trials(1));
  EXPECT_GE(r.choice_slots, 1);
  rt.set_data(x, std::vector<float>(64, 3.f));
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(y), std::vector<float>(64, 8.f));
}

namespace {
// A backend whose rules include an unsound rewrite that makes NaN on the search's
// all-ones inputs: search must reject those candidates and keep a correct program.
class PoisonedRuntime : public ReferenceRuntime {
 public:
  explicit PoisonedRuntime(std::string rules) : rules_(std::move(rules)) {}
  std::unique_ptr<Runtime> fresh() const override { return std::make_unique<PoisonedRuntime>(rules_); }
  std::vector<std::string> rule_files() const override {
    auto files = ReferenceRuntime::rule_files();
    files.push_back(rules_);
    return files;
  }

 private:
  std::string rules_;
};
}  // namespace

TEST(Search, RejectsCandidatesThatProduceNaN) {
  std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "-poison.egg";
  std::ofstream(path) << R"((ruleset poison)
(rule ((= ?e (Sqrt ?dt ?sh ?x ?v)) (= ?x (Input ?dt ?sh ?id)))
      ((union ?e (Sqrt ?dt ?sh (Mul ?dt ?sh ?x ?v (Constant ?dt (empty-shape) -1.0) (broadcast-view ?sh)) ?v)))
  :ruleset poison :name "sqrt-of-negated")
)";
  Graph cx;
  auto x = cx.tensor({8});
  auto y = x.sqrt().output();
  CompileReport r;
  auto rt = cx.compile(PoisonedRuntime(path), CompileOptions().rulesets({"core", "poison"}).report(&r).trials(1).seed(5));
  EXPECT_GE(r.choice_slots, 1);
  EXPECT_GE(r.rejected, 1);  // the poisoned candidate was tried and rejected
  rt.set_data(x, std::vector<float>(8, 4.f));
  rt.execute(cx.dim_map());
  EXPECT_EQ(rt.get_f32(y), std::vector<float>(8, 2.f));
}

TEST(Search, DimBucketsPickAPlanAtExecute) {
  Graph cx;
  auto seq = Expression::var("seq");
  auto x = cx.tensor({seq, 4});
  auto y = (x * 2.0).sum({0}).output();
  CompileReport r;
  auto rt = cx.compile(ReferenceRuntime{},
                       CompileOptions().dim_buckets("seq", {DimBucket(1, 1), DimBucket(2, 64)}).report(&r));
  EXPECT_EQ(r.plans, 2);
  for (int n : {1, 7, 1}) {
    rt.set_data(x, std::vector<float>(4 * n, 1.f));
    rt.execute({{"seq", n}});
    EXPECT_EQ(rt.get_f32(y), std::vector<float>(4, 2.f * n));
  }
  rt.set_data(x, std::vector<float>(4 * 65, 1.f));
  EXPECT_THROW(rt.execute({{"seq", 65}}), Error);
  EXPECT_THROW(cx.compile(ReferenceRuntime{}, CompileOptions().dim_buckets("seq", {DimBucket(1, 8), DimBucket(4, 9)})),
               Error);
}
