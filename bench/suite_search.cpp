// scripts/bench search: e-graph build + saturation of a Llama-3-8B-shaped graph (and
// how 32 layers compare with 1), and a full compile with time per phase.
#include <chrono>
#include <cstdio>
#include <string>

#include "llama_shape.hpp"
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
}  // namespace

int main() {
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

  // Full compile at the default budget on the reference runtime, time per phase.
  compile_case("llama3_8b_full_compile_reference", bench::LlamaShape{}, 1, CompileOptions());
  // A search that profiles: a small Llama-shaped graph with the commute rules on, at
  // the default budget (100 candidates per segment), so every phase does real work.
  compile_case("small_llama_full_search_reference", bench::LlamaShape{4, 128, 4, 2, 384, 512}, 8,
               CompileOptions().rulesets({"core", "commute"}));
  return 0;
}
