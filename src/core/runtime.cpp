#include "luminal/runtime.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "luminal/compile.hpp"
#include "luminal/error.hpp"
#include "luminal/plan/memory_planner.hpp"
#include "luminal/safetensors.hpp"

namespace luminal {

std::vector<RuleStage> Runtime::rule_stages(const CompileOptions& o) const {
  RuleStage stage;
  stage.name = "rules";
  stage.rulesets = o.rulesets_;
  stage.node_limit = o.egraph_node_limit_;
  stage.time_limit_s = std::min(60.0, o.search_time_limit_.count());
  return {stage};
}

CostEstimate Runtime::estimate(const Graph& program, const DimMap& dims) const {
  // Every non-Input node owns a buffer; the planner packs those whose lifetimes do not
  // overlap. Inputs are the user's data, counted once.
  CostEstimate e;
  auto bytes_of = [&](const Node& n) {
    auto numel = product(n.shape).try_eval(dims);
    return numel ? *numel * static_cast<int64_t>(dtype_bytes(n.dtype)) : 0;
  };
  auto arena = plan::plan_program(program, dims, [&](NodeId id) { return program.node(id).op != OpKind::Input; });
  e.memory_bytes = arena.arena_bytes;
  for (const Node& n : program.nodes())
    if (n.op == OpKind::Input) e.memory_bytes += bytes_of(n);
  return e;
}

double profiling_scale(const Node& input, const DimMap& dims) {
  if (input.shape.size() < 2) return 2.0;
  const int64_t inner = input.shape.back().eval(dims);
  return inner > 1 ? 2.0 / std::sqrt(static_cast<double>(inner)) : 2.0;
}

HostTensor profiling_values(const Node& n, const DimMap& dims, uint64_t seed, InputValues values) {
  auto numel = static_cast<size_t>(product(n.shape).eval(dims));
  HostTensor t = HostTensor::zeros(n.dtype, numel);
  std::mt19937_64 rng(seed);
  const double scale = profiling_scale(n, dims);
  std::uniform_real_distribution<double> uni(-scale, scale);
  // The large magnitudes last: SpecialHalf draws from the others.
  static const double kSpecial[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, -1e-40, 1.0, -1.0, 65504.0, -3.0e38};
  const bool adversarial = values != InputValues::Uniform;
  const size_t specials = values == InputValues::Special ? std::size(kSpecial) : std::size(kSpecial) - 2;
  for (size_t k = 0; k < numel; ++k) {
    if (!is_float(n.dtype)) t.set_i64(k, static_cast<int64_t>(rng() % 2));
    else if (adversarial && rng() % 8 == 0) t.set_f64(k, kSpecial[rng() % specials]);
    else t.set_f64(k, uni(rng));
  }
  return t;
}

void Runtime::fill_profiling_input(NodeId id, const Node& input, const DimMap& dims, uint64_t seed,
                                   InputValues values) {
  set_tensor(id, profiling_values(input, dims, seed, values));
}

ProfileResult Runtime::profile(const DimMap& dims, const ProfileOptions& o) {
  using clock = std::chrono::steady_clock;
  ProfileResult r;
  double best = std::numeric_limits<double>::infinity();
  auto start = clock::now();
  set_deadline(start + std::chrono::duration_cast<clock::duration>(o.timeout));
  try {
    for (int t = 0; t < std::max(o.warmup, 0) + std::max(o.trials, 1); ++t) {
      auto t0 = clock::now();
      const int runs = t >= o.warmup ? std::max(o.runs_per_trial, 1) : 1;
      for (int i = 0; i < runs; ++i) run(active_slot_, dims);
      if (t >= o.warmup) best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count() / runs);
      else r.warmup_seconds = std::chrono::duration<double>(clock::now() - start).count();
      if (clock::now() - start > o.timeout) {
        r.timed_out = true;
        break;
      }
    }
  } catch (const ProfileTimeout&) {
    r.timed_out = true;
  } catch (...) {
    set_deadline(std::nullopt);
    throw;
  }
  set_deadline(std::nullopt);
  r.seconds = best;
  return r;
}

void Runtime::load(const Graph& program, std::vector<NodeId> external_ids) {
  plan_ranges_.assign(1, {});
  active_slot_ = 0;
  load_program(0, program, std::move(external_ids));
}

void Runtime::load_plans(std::vector<Plan> plans, uint64_t source_graph_uid) {
  LUMINAL_ASSERT(!plans.empty(), "no plans");
  source_uid_ = source_graph_uid;
  plan_ranges_.clear();
  for (size_t p = 0; p < plans.size(); ++p) {
    plan_ranges_.push_back(plans[p].ranges);
    load_program(p, plans[p].program, std::move(plans[p].external_ids));
  }
  active_slot_ = 0;
}

void Runtime::execute(const DimMap& dims) {
  if (plan_ranges_.size() > 1) {
    int match = -1;
    for (size_t p = 0; p < plan_ranges_.size() && match < 0; ++p) {
      bool ok = true;
      for (const auto& [dim, range] : plan_ranges_[p]) {
        auto it = dims.find(dim);
        LUMINAL_CHECK(it != dims.end(), "execute: dimension '", dim, "' has no value");
        ok = ok && it->second >= range.first && it->second <= range.second;
      }
      if (ok) match = static_cast<int>(p);
    }
    if (match < 0) {
      std::string values;
      for (const auto& [dim, range] : plan_ranges_[0]) values += " " + dim + "=" + std::to_string(dims.at(dim));
      fail("execute: no dim bucket holds", values, "; compile with buckets that cover it");
    }
    active_slot_ = static_cast<size_t>(match);  // every plan is resident: nothing to copy
  }
  run(active_slot_, dims);
}

void Runtime::set_data(const GraphTensor& t, const std::vector<float>& v) {
  set_data(t, HostTensor::from<float>(v, t.dtype()));
}
void Runtime::set_data(const GraphTensor& t, const std::vector<double>& v) {
  set_data(t, HostTensor::from<double>(v, t.dtype()));
}
void Runtime::set_data(const GraphTensor& t, const std::vector<int32_t>& v) {
  set_data(t, HostTensor::from<int32_t>(v, t.dtype()));
}
void Runtime::set_data(const GraphTensor& t, const std::vector<int64_t>& v) {
  set_data(t, HostTensor::from<int64_t>(v, t.dtype()));
}
void Runtime::check_graph(const GraphTensor& t) const {
  LUMINAL_CHECK(source_uid_ == 0 || t.graph().uid() == source_uid_,
                "tensor ", t.id(), " belongs to a different graph than the one this runtime was compiled from");
}

void Runtime::set_data(const GraphTensor& t, HostTensor data) {
  check_graph(t);
  LUMINAL_CHECK(t.graph().node(t.id()).op == OpKind::Input, "set_data: tensor ", t.id(), " is a ",
                op_name(t.graph().node(t.id()).op), ", not an input");
  // Only a static shape can be checked now; symbolic ones are checked at execute.
  auto n = t.numel().as_constant();
  if (n) LUMINAL_CHECK(static_cast<int64_t>(data.numel()) == *n, "set_data: tensor '",
                       t.graph().node(t.id()).label, "' of shape ", to_string(t.shape()), " needs ", *n,
                       " elements, got ", data.numel());
  set_tensor(t.id(), data.cast(t.dtype()));
}

std::vector<bool> Runtime::get_bool(const GraphTensor& t) const {
  auto v = get(t).to_i64();
  return std::vector<bool>(v.begin(), v.end());
}

std::vector<std::string> Runtime::load_safetensors(const Graph& graph, const std::string& path, bool allow_missing) {
  SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> loaded;
  for (NodeId id : graph.inputs()) {
    const Node& n = graph.node(id);
    if (!file.contains(n.label)) {
      LUMINAL_CHECK(allow_missing, "load_safetensors: tensor '", n.label,
                    "' not found in '", path, "'");
      continue;
    }
    const auto& e = file.entry(n.label);
    std::vector<int64_t> want;
    for (const auto& d : n.shape) {
      auto v = d.try_eval(graph.dim_map());
      LUMINAL_CHECK(v.has_value(), "load_safetensors: tensor '", n.label, "' has symbolic shape ",
                    to_string(n.shape), "; set its dims before loading");
      want.push_back(*v);
    }
    LUMINAL_CHECK(want == e.shape, "load_safetensors: tensor '", n.label, "' in '", path, "' has shape ",
                  to_string(Shape(e.shape.begin(), e.shape.end())), " but the graph expects ", to_string(n.shape));
    set_tensor(id, file.read(n.label).cast(n.dtype));
    loaded.push_back(n.label);
  }
  return loaded;
}

}  // namespace luminal
