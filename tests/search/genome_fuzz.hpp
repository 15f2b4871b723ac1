// Genome fuzzing through a backend: random extractions of the e-graph grown by the core
// rules and the backend's rule files (in its stages) must all compute what the
// unrewritten graph computes on the reference interpreter, on inputs with negatives and
// special values (+-0, +-inf, NaN, subnormals). Shared by the kernel test backend
// (tests/search) and the CPU backend (backends/cpu/tests).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <unordered_set>

#include "luminal/luminal.hpp"
#include "luminal/search/genetic.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "test_graphs.hpp"

namespace luminal::testing {


// Inputs of both signs with special values mixed in (1 in 8).
inline std::vector<std::pair<GraphTensor, HostTensor>> adversarial_inputs(TestModel& m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 0.7);
  const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-41, -1e-41, 65504.0, -1.0};
  std::vector<std::pair<GraphTensor, HostTensor>> out;
  for (auto& t : m.inputs) {
    size_t n = static_cast<size_t>(t.numel().eval(m.cx.dim_map()));
    HostTensor h = HostTensor::zeros(t.dtype(), n);
    for (size_t k = 0; k < n; ++k) h.set_f64(k, rng() % 8 == 0 ? special[rng() % std::size(special)] : dist(rng));
    out.emplace_back(t, std::move(h));
  }
  return out;
}

inline bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= 1e-3 * (1 + std::abs(b));
}

struct FuzzResult {
  int ran = 0, with_fused = 0, distinct = 0;
};

inline FuzzResult fuzz_genomes_on(TestModel& m, Runtime& backend, int candidates) {
  FuzzResult r;
  // The unrewritten graph on the reference interpreter is the oracle.
  std::vector<std::vector<std::pair<GraphTensor, HostTensor>>> data;
  std::vector<std::vector<std::vector<double>>> expect;
  for (uint32_t s = 0; s < 2; ++s) {
    data.push_back(adversarial_inputs(m, 100 + s));
    ReferenceRuntime ref;
    std::vector<NodeId> ids(m.cx.size());
    for (NodeId i = 0; i < ids.size(); ++i) ids[i] = i;
    ref.load(m.cx, ids);
    for (auto& [t, h] : data.back()) ref.set_data(t, h);
    ref.execute(m.cx.dim_map());
    expect.emplace_back();
    for (auto& o : m.outputs) expect.back().push_back(ref.get_f64(o));
  }

  auto lowered = search::lower_to_egraph(m.cx, [&](egraph::EGraph& eg) { backend.register_primitives(eg); });
  auto files = search::core_rule_files();
  for (auto& f : backend.rule_files()) files.push_back(f);
  search::load_rule_files(lowered, files);
  for (const auto& stage : backend.rule_stages(CompileOptions().rulesets({"core", "commute"}))) {
    std::vector<egraph::Schedule> sets;
    for (auto& rs : stage.rulesets) sets.push_back(egraph::Schedule::run(rs));
    egraph::RunOptions ro;
    ro.node_limit = static_cast<size_t>(stage.node_limit);
    lowered.egraph->run(egraph::Schedule::saturate(sets), ro);
  }
  auto space = search::choice_space(lowered);
  EXPECT_GT(space.slots.size(), 4u);

  // Draw the candidates, then compile all their kernels at once.
  std::mt19937_64 rng(42);
  std::vector<search::Extracted> programs;
  std::unordered_set<uint64_t> seen;
  for (int c = 0; c < candidates; ++c) {
    search::Genome g(space.slots.size());
    for (size_t s = 0; s < g.size(); ++s) g[s] = static_cast<uint32_t>(rng() % space.options[s].size());
    auto p = search::extract(lowered, space, g);
    if (!p) continue;  // a cyclic choice is rejected, never executed
    for (NodeId i = 0; i < p->program.size(); ++i)
      if (p->program.node(i).op == OpKind::Input) p->program.mutable_node(i).persist = true;
    if (seen.insert(search::structural_hash(p->program)).second) r.distinct++;
    programs.push_back(std::move(*p));
  }
  std::vector<const Graph*> ptrs;
  for (auto& p : programs) ptrs.push_back(&p.program);
  backend.prepare(ptrs);

  for (size_t c = 0; c < programs.size(); ++c) {
    const auto& p = programs[c];
    bool fused = false;
    for (const Node& n : p.program.nodes()) fused = fused || (n.op == OpKind::BackendOp && n.backend->name == "Fused");
    r.with_fused += fused;
    auto rt = backend.fresh();
    rt->load_program(0, p.program, p.io_of);
    for (size_t s = 0; s < data.size(); ++s) {
      for (auto& [t, h] : data[s]) rt->set_tensor(t.id(), h);
      rt->execute(m.cx.dim_map());
      for (size_t o = 0; o < m.outputs.size(); ++o) {
        auto got = rt->get_tensor(m.outputs[o].id()).to_f64();
        const auto& want = expect[s][o];
        EXPECT_EQ(got.size(), want.size());
        for (size_t k = 0; k < got.size() && k < want.size(); ++k)
          if (!same_value(got[k], want[k])) {
            ADD_FAILURE() << "candidate " << c << " input set " << s << " output " << o << " element " << k << ": "
                          << got[k] << " instead of " << want[k];
            return r;
          }
      }
    }
    ++r.ran;
  }
  return r;
}


}  // namespace luminal::testing
