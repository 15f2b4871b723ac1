// scripts/bench search: e-graph build + saturation of a Llama-3-8B-shaped graph (and
// how 32 layers compare with 1), and a full compile with time per phase.
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "llama_shape.hpp"
#include "luminal/kernel/fusion.hpp"
#include "luminal/search/genetic.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "luminal/search/segments.hpp"

using namespace luminal;
using clock_type = std::chrono::steady_clock;

namespace {
double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

struct BuildStats {
  double seconds = 0;
  size_t nodes = 0, classes = 0, segments = 0, hlir_nodes = 0;
};

// The compile front half: find repeats, cut segments, lower each distinct one into the
// e-graph with the core rules, saturate. (No search: that is measured separately.)
BuildStats build_and_saturate(int layers) {
  bench::LlamaShape shape;
  shape.layers = layers;
  Graph cx;
  bench::build_llama_shaped(cx, shape);
  BuildStats s;
  s.hlir_nodes = cx.size();
  auto t = clock_type::now();
  auto block = search::find_repeated_block(cx);
  search::compile_by_segments(
      cx,
      [&](const Graph& seg) {
        auto lowered = search::lower_to_egraph(seg);
        for (const auto& f : search::core_rule_files()) lowered.egraph->load_file(f);
        lowered.egraph->run(egraph::Schedule::saturate({egraph::Schedule::run("core")}));
        s.nodes += lowered.egraph->num_nodes();
        s.classes += lowered.egraph->num_classes();
        s.segments++;
        search::SegmentProgram p{seg, {}};
        for (NodeId i = 0; i < seg.size(); ++i) p.io_of.push_back(i);
        return p;
      },
      block);
  s.seconds = seconds_since(t);
  return s;
}

void emit(const std::string& name, double value, const std::string& unit, const std::string& better,
          const std::string& extra) {
  std::printf("{\"suite\":\"search\",\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"better\":\"%s\"%s}\n",
              name.c_str(), value, unit.c_str(), better.c_str(), extra.c_str());
  std::fflush(stdout);
}
void compile_case(const std::string& name, const bench::LlamaShape& shape, int64_t seq, CompileOptions options) {
  Graph cx;
  bench::build_llama_shaped(cx, shape);
  cx.set_dim("seq", seq);
  CompileReport r;
  auto t = clock_type::now();
  cx.compile(ReferenceRuntime{}, options.report(&r));
  double total = seconds_since(t);
  char extra[512];
  std::snprintf(extra, sizeof extra,
                ",\"phases\":{\"find_repeats\":%.4f,\"build_egraph\":%.4f,\"saturate\":%.4f,\"search\":%.4f,"
                "\"stitch_load\":%.4f},\"candidates\":%lld,\"rejected\":%lld,\"choice_slots\":%lld,"
                "\"segments_searched\":%lld",
                r.find_repeats_s, r.build_egraph_s, r.saturate_s, r.search_s, r.stitch_load_s,
                static_cast<long long>(r.candidates), static_cast<long long>(r.rejected),
                static_cast<long long>(r.choice_slots), static_cast<long long>(r.segments_compiled));
  emit(name, total, "s", "lower", extra);
}
// A backend whose every run takes 1 ms and computes nothing (outputs are zeros): it
// measures what the search itself costs per candidate. Its rules are the generated
// fusion rules of the kernel IR, so the e-graph holds real choices.
class SpinRuntime : public Runtime {
 public:
  std::string_view name() const override { return "spin-1ms"; }
  std::unique_ptr<Runtime> fresh() const override { return std::make_unique<SpinRuntime>(); }
  std::vector<std::string> rule_files() const override { return {kernel::fusion_rule_file()}; }
  void register_primitives(egraph::EGraph& eg) const override { kernel::register_fusion_primitives(eg); }
  std::vector<RuleStage> rule_stages(const CompileOptions& o) const override {
    auto stages = Runtime::rule_stages(o);
    stages.push_back({"fuse", {"fuse"}, 20'000, 1.5});
    return stages;
  }
  // Profiling data costs nothing here (a device backend makes it on the device).
  void fill_profiling_input(NodeId id, const Node&, const DimMap&, uint64_t, InputValues) override {
    set_ids_.push_back(id);
  }
  void load_program(size_t slot, const Graph& program, std::vector<NodeId> ids) override {
    if (programs_.size() <= slot) programs_.resize(slot + 1);
    programs_[slot] = {program, std::move(ids)};
  }
  void set_tensor(NodeId id, HostTensor t) override { data_[id] = std::move(t); }
  HostTensor get_tensor(NodeId id) const override { return data_.at(id); }
  bool has_tensor(NodeId id) const override { return data_.count(id) > 0; }

 protected:
  void run(size_t slot, const DimMap& dims) override {
    auto until = clock_type::now() + std::chrono::milliseconds(1);
    while (clock_type::now() < until) {
    }
    const auto& [g, ids] = programs_[slot];
    for (NodeId i = 0; i < g.size(); ++i)
      if (g.node(i).op == OpKind::Output && ids[i] != kNoNode && !data_.count(ids[i]))
        data_[ids[i]] = HostTensor::zeros(g.node(i).dtype, static_cast<size_t>(product(g.node(i).shape).eval(dims)));
  }

 private:
  std::vector<std::pair<Graph, std::vector<NodeId>>> programs_;
  std::map<NodeId, HostTensor> data_;
  std::vector<NodeId> set_ids_;
};

// The Llama-3-8B-shaped graph (32 layers, decode at seq 1) compiled for the 1 ms backend
// with the fusion rules: e-graph size and saturation time, setup per candidate, and
// candidates per minute.
void fusion_search_cases() {
  Graph cx;
  bench::build_llama_shaped(cx, bench::LlamaShape{});
  cx.set_dim("seq", 1);
  CompileReport r;
  auto t = clock_type::now();
  cx.compile(SpinRuntime{}, CompileOptions().report(&r).search_graph_limit(1000).verify(VerifyMode::Never));
  double total = seconds_since(t);
  char extra[512];
  std::snprintf(extra, sizeof extra,
                ",\"target\":2.0,\"egraph_nodes\":%lld,\"egraph_classes\":%lld,\"choice_slots\":%lld,"
                "\"build_egraph_s\":%.4f,\"saturate_s\":%.4f,\"stop\":\"%s\"",
                static_cast<long long>(r.egraph_nodes), static_cast<long long>(r.egraph_classes),
                static_cast<long long>(r.choice_slots), r.build_egraph_s, r.saturate_s, r.egraph_stop.c_str());
  emit("llama3_8b_fusion_rules_build_saturate", r.build_egraph_s + r.saturate_s, "s", "lower", extra);
  double per_candidate_ms = r.candidates ? 1e3 * r.setup_s / static_cast<double>(r.candidates) : 0;
  std::snprintf(extra, sizeof extra, ",\"target\":5.0,\"candidates\":%lld,\"duplicates\":%lld",
                static_cast<long long>(r.candidates), static_cast<long long>(r.duplicates));
  emit("llama3_8b_setup_ms_per_candidate", per_candidate_ms, "ms", "lower", extra);
  double per_minute = r.search_s > 0 ? 60.0 * static_cast<double>(r.candidates) / r.search_s : 0;
  std::snprintf(extra, sizeof extra,
                ",\"target\":1000,\"backend_run_ms\":1,\"runs_per_candidate\":4,\"candidates\":%lld,"
                "\"search_s\":%.3f,\"compile_total_s\":%.3f",
                static_cast<long long>(r.candidates), r.search_s, total);
  emit("llama3_8b_candidates_per_minute_1ms_backend", per_minute, "candidates/min", "higher", extra);
}
}  // namespace

int main() {
  fusion_search_cases();
  // Warm the interners once so the first measurement is not penalised.
  build_and_saturate(1);
  BuildStats one = build_and_saturate(1);
  BuildStats full = build_and_saturate(32);
  char extra[512];
  std::snprintf(extra, sizeof extra,
                ",\"target\":2.0,\"hlir_nodes\":%zu,\"egraph_nodes\":%zu,\"egraph_classes\":%zu,\"segments_searched\":%zu",
                full.hlir_nodes, full.nodes, full.classes, full.segments);
  emit("llama3_8b_build_saturate_32_layers", full.seconds, "s", "lower", extra);
  std::snprintf(extra, sizeof extra, ",\"hlir_nodes\":%zu,\"egraph_nodes\":%zu", one.hlir_nodes, one.nodes);
  emit("llama3_8b_build_saturate_1_layer", one.seconds, "s", "lower", extra);
  std::snprintf(extra, sizeof extra,
                ",\"wall_ratio\":%.1f,\"note\":\"e-graph nodes built for 32 layers / for 1 layer (~1: the layers share one"
                " e-graph and one search); wall_ratio also counts the linear cutting and stitching of 3416 HLIR nodes\"",
                full.seconds / one.seconds);
  emit("llama3_8b_32_vs_1_layer_egraph_size", double(full.nodes) / double(one.nodes), "x", "lower", extra);

  // Full compile on the reference runtime, time per phase (the reference interpreter
  // computes in double: a 8B-shaped layer takes seconds per run, so the search budget
  // is what bounds this case).
  compile_case("llama3_8b_full_compile_reference", bench::LlamaShape{}, 1,
               CompileOptions().search_time_limit(std::chrono::seconds(20)));
  // A search that profiles: a small Llama-shaped graph with the commute rules on, at
  // the default budget (100 candidates per segment), so every phase does real work.
  compile_case("small_llama_full_search_reference", bench::LlamaShape{4, 128, 4, 2, 384, 512}, 8,
               CompileOptions().rulesets({"core", "commute"}));
  return 0;
}
