// The compile pipeline. It reads top to bottom; each stage is a function:
//   1. find repeated structure (identical layers are searched once);
//   2. for each dim-bucket combination, for each distinct segment:
//        lower to the e-graph -> saturate the rule sets -> genetic search, profiling
//        candidates on a fresh runtime of the target kind;
//   3. stitch the segment programs and load one plan per bucket combination.
#include "luminal/compile.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/runtime.hpp"
#include "luminal/search/genetic.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "luminal/search/segments.hpp"

namespace luminal {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// Every combination of buckets, as (ranges, representative dims).
std::vector<std::pair<std::map<std::string, std::pair<int64_t, int64_t>>, DimMap>> bucket_combinations(
    const CompileOptions& o, const DimMap& base) {
  std::vector<std::pair<std::map<std::string, std::pair<int64_t, int64_t>>, DimMap>> combos = {{{}, base}};
  for (const auto& [dim, buckets] : o.dim_buckets_) {
    LUMINAL_CHECK(!buckets.empty(), "dim_buckets: no buckets for '", dim, "'");
    for (size_t i = 0; i < buckets.size(); ++i) {
      LUMINAL_CHECK(buckets[i].min <= buckets[i].max, "dim_buckets: bucket [", buckets[i].min, ", ", buckets[i].max,
                    "] of '", dim, "' is empty");
      LUMINAL_CHECK(buckets[i].contains(buckets[i].rep()), "dim_buckets: representative ", buckets[i].rep(),
                    " of '", dim, "' is outside its bucket");
      for (size_t j = 0; j < i; ++j)
        LUMINAL_CHECK(buckets[i].max < buckets[j].min || buckets[j].max < buckets[i].min,
                      "dim_buckets: overlapping buckets for '", dim, "': [", buckets[j].min, ", ", buckets[j].max,
                      "] and [", buckets[i].min, ", ", buckets[i].max, "]");
    }
    std::vector<std::pair<std::map<std::string, std::pair<int64_t, int64_t>>, DimMap>> next;
    for (const auto& [ranges, dims] : combos)
      for (const auto& b : buckets) {
        auto r = ranges;
        auto d = dims;
        r[dim] = {b.min, b.max};
        d[dim] = b.rep();
        next.emplace_back(std::move(r), std::move(d));
      }
    combos = std::move(next);
  }
  return combos;
}

// Run `program` once on ones; nullopt-free result describes time or rejection.
search::Evaluation profile_candidate(const Runtime& target, const Graph& candidate, const DimMap& dims,
                                     const CompileOptions& o, bool is_baseline) {
  search::Evaluation e;
  try {
    // Every input persists while profiling, so all `trials` runs see the same data.
    Graph program = candidate;
    for (NodeId i = 0; i < program.size(); ++i)
      if (program.node(i).op == OpKind::Input) program.mutable_node(i).persist = true;
    std::unique_ptr<Runtime> rt = target.fresh();
    std::vector<NodeId> ids(program.size());
    for (NodeId i = 0; i < program.size(); ++i) ids[i] = i;
    rt->load(program, ids);
    for (NodeId i = 0; i < program.size(); ++i) {
      const Node& n = program.node(i);
      if (n.op != OpKind::Input) continue;
      // Ones, never zeros: zeros make recip/log/mod produce inf and NaN everywhere.
      auto numel = static_cast<size_t>(product(n.shape).eval(dims));
      HostTensor ones = HostTensor::zeros(n.dtype, numel);
      for (size_t k = 0; k < numel; ++k) ones.set_f64(k, 1.0);
      rt->set_tensor(i, std::move(ones));
    }
    ProfileResult r = rt->profile(dims, o.trials_, o.profile_timeout_);
    if (r.timed_out && !is_baseline) {
      e.rejection = search::Rejection::Timeout;
      return e;
    }
    for (NodeId i = 0; i < program.size(); ++i) {
      const Node& n = program.node(i);
      if (n.op != OpKind::Output || !is_float(n.dtype)) continue;
      for (double v : rt->get_tensor(i).to_f64())
        if (std::isnan(v)) {
          e.rejection = search::Rejection::NaN;
          return e;
        }
    }
    e.seconds = r.seconds;
  } catch (const std::exception& ex) {
    e.rejection = search::Rejection::Throws;
    e.detail = ex.what();
  }
  return e;
}

// Lower one segment into the e-graph, saturate, search, and return the best program.
search::SegmentProgram search_segment(const Graph& segment, const Runtime& target, const CompileOptions& o,
                                      const DimMap& dims, CompileReport& report) {
  auto t0 = clock_type::now();
  search::LoweredGraph lowered = search::lower_to_egraph(segment);
  for (const auto& file : search::core_rule_files()) lowered.egraph->load_file(file);
  for (const auto& file : target.rule_files()) lowered.egraph->load_file(file);
  report.build_egraph_s += since(t0);

  auto t1 = clock_type::now();
  std::vector<egraph::Schedule> sets;
  for (const auto& r : o.rulesets_) {
    LUMINAL_CHECK(lowered.egraph->has_ruleset(r), "compile: unknown rule set '", r, "'");
    sets.push_back(egraph::Schedule::run(r));
  }
  egraph::RunOptions run;
  run.node_limit = static_cast<size_t>(o.egraph_node_limit_);
  run.time_limit_s = std::min(60.0, o.search_time_limit_.count());
  egraph::RunReport rr = lowered.egraph->run(egraph::Schedule::saturate(sets), run);
  report.egraph_stop = egraph::stop_reason_name(rr.stop);
  report.saturate_s += since(t1);
  report.egraph_nodes += static_cast<int64_t>(lowered.egraph->num_nodes());
  report.egraph_classes += static_cast<int64_t>(lowered.egraph->num_classes());

  auto t2 = clock_type::now();
  search::ChoiceSpace space = search::choice_space(lowered);
  report.choice_slots += static_cast<int64_t>(space.slots.size());
  std::vector<uint32_t> choices;
  for (const auto& opts : space.options) choices.push_back(static_cast<uint32_t>(opts.size()));
  search::Genome best(space.slots.size(), 0);
  // Profiling needs a value for every dim; without one the baseline is kept.
  std::string missing_dim;
  for (const Node& n : segment.nodes())
    for (const auto& d : n.shape)
      for (const auto& v : d.variables())
        if (!dims.count(v) && missing_dim.empty()) missing_dim = v;
  if (!missing_dim.empty() && !space.slots.empty()) {
    report.notes.push_back("search skipped: dimension '" + missing_dim +
                           "' has no value at compile time (set_dim or dim_buckets)");
  } else if (!space.slots.empty()) {
    const search::Genome baseline(space.slots.size(), 0);
    auto evaluate = [&](const search::Genome& g) {
      auto program = search::extract(lowered, space, g);
      if (!program) return search::Evaluation{std::nullopt, search::Rejection::Invalid, "cyclic choice"};
      return profile_candidate(target, program->program, dims, o, g == baseline);
    };
    search::SearchResult result = search::genetic_search(choices, o, evaluate);
    best = result.best;
    report.candidates += result.report.candidates;
    for (auto r : result.report.rejected) report.rejected += r;
  }
  auto program = search::extract(lowered, space, best);
  LUMINAL_ASSERT(program.has_value(), "the chosen program is cyclic");
  report.search_s += since(t2);
  report.segments_compiled++;
  return {std::move(program->program), std::move(program->io_of)};
}

}  // namespace

std::string CompileReport::to_string() const {
  std::ostringstream os;
  os << "compile: " << total_s << " s (repeats " << find_repeats_s << ", e-graph " << build_egraph_s
     << ", saturate " << saturate_s << ", search " << search_s << ", stitch+load " << stitch_load_s << "); "
     << segments_compiled << " segments searched";
  if (block_copies) os << ", block of " << block_period << " nodes x " << block_copies;
  os << "; e-graph " << egraph_nodes << " nodes / " << egraph_classes << " classes (" << egraph_stop << "), "
     << choice_slots << " choice slots, " << candidates << " candidates (" << rejected << " rejected), " << plans
     << " plan(s)";
  return os.str();
}

void Graph::compile_into(Runtime& runtime, const CompileOptions& options) const {
  auto start = clock_type::now();
  CompileReport report;

  // 1. Identical layers are searched once.
  auto t = clock_type::now();
  auto block = search::find_repeated_block(*this);
  if (block) {
    report.block_copies = block->count;
    report.block_period = block->period;
  }
  report.find_repeats_s = since(t);

  // 2. One plan per dim-bucket combination.
  std::vector<Runtime::Plan> plans;
  for (const auto& [ranges, dims] : bucket_combinations(options, dim_map())) {
    auto segment_search = [&](const Graph& segment) {
      return search_segment(segment, runtime, options, dims, report);
    };
    auto [program, external] = search::compile_by_segments(*this, segment_search, block);
    plans.push_back({ranges, std::move(program), std::move(external)});
  }

  // 3. Load.
  t = clock_type::now();
  report.plans = static_cast<int64_t>(plans.size());
  runtime.load_plans(std::move(plans), uid());
  report.stitch_load_s = since(t);
  report.total_s = since(start);
  if (options.verbose_) {
    std::fprintf(stderr, "%s\n", report.to_string().c_str());
    for (const auto& note : report.notes) std::fprintf(stderr, "  note: %s\n", note.c_str());
  }
  if (options.report_) *options.report_ = report;
}

}  // namespace luminal
