// Compile options: how much search to spend and how to bucket dynamic dims.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "luminal/dtype.hpp"

namespace luminal {

// An inclusive range of values of one dynamic dim, searched with `representative`.
struct DimBucket {
  int64_t min = 0, max = 0;
  std::optional<int64_t> representative_value;  // default: midpoint
  DimBucket(int64_t lo, int64_t hi) : min(lo), max(hi) {}
  DimBucket& representative(int64_t v) { representative_value = v; return *this; }
  int64_t rep() const { return representative_value.value_or((min + max) / 2); }
  bool contains(int64_t v) const { return v >= min && v <= max; }
};

// Whether the chosen program is checked against the unrewritten one on adversarial
// inputs (negatives, +-0, +-inf, NaN, subnormals) before it is kept.
enum class VerifyMode { Auto, Always, Never };  // Auto: segments of at most 4096 nodes

// What a compile did, phase by phase (seconds).
struct CompileReport {
  double find_repeats_s = 0, build_egraph_s = 0, saturate_s = 0, search_s = 0, verify_s = 0, stitch_load_s = 0,
         total_s = 0;
  double setup_s = 0;  // extracting and loading candidates (per candidate: setup_s / candidates)
  int64_t segments_compiled = 0, segments_reused = 0, block_copies = 0, block_period = 0;
  int64_t segments_cached = 0;  // loaded from the program cache: no saturation, search or verification
  int64_t egraph_nodes = 0, egraph_classes = 0, choice_slots = 0;
  int64_t candidates = 0, rejected = 0, duplicates = 0;
  int64_t verified = 0, verify_failures = 0;
  int64_t plans = 0;
  int64_t peak_bytes = 0;  // memory planner: the largest plan's arena plus its inputs
  std::string egraph_stop;  // why saturation stopped (last segment)
  std::vector<std::string> notes;
  std::string to_string() const;
};

struct CompileOptions {
  int64_t search_graph_limit_ = 100;  // candidates profiled at most
  // The whole compile's search budget, shared by its segments and buckets.
  std::chrono::duration<double> search_time_limit_{60.0};
  int generation_size_ = 10;
  int mutations_ = 10;
  int trials_ = 3;
  int warmup_ = 1;
  VerifyMode verify_ = VerifyMode::Auto;
  int keep_best_ = 1;
  std::chrono::duration<double> profile_timeout_{1.0};
  uint64_t seed_ = 0;
  std::optional<int64_t> memory_limit_bytes_;
  std::map<std::string, std::vector<DimBucket>> dim_buckets_;
  bool verbose_ = false;  // progress bar and summary on stderr
  std::vector<std::string> rulesets_ = {"core"};  // saturated before search
  int64_t egraph_node_limit_ = 200'000;
  struct CompileReport* report_ = nullptr;  // filled when set
  // Reuse the programs earlier compiles chose (include/luminal/program_cache.hpp). Unset:
  // on, unless the environment says LUMINAL_PROGRAM_CACHE=0 (the test suites do).
  std::optional<bool> program_cache_;
  std::string program_cache_dir_;  // empty: $LUMINAL_CACHE_DIR/programs or ~/.cache/luminal/programs

  CompileOptions& search_graph_limit(int64_t v) { search_graph_limit_ = v; return *this; }
  CompileOptions& search_time_limit(std::chrono::duration<double> v) { search_time_limit_ = v; return *this; }
  CompileOptions& generation_size(int v) { generation_size_ = v; return *this; }
  CompileOptions& mutations(int v) { mutations_ = v; return *this; }
  CompileOptions& trials(int v) { trials_ = v; return *this; }
  CompileOptions& warmup(int v) { warmup_ = v; return *this; }
  CompileOptions& verify(VerifyMode v) { verify_ = v; return *this; }
  CompileOptions& keep_best(int v) { keep_best_ = v; return *this; }
  CompileOptions& profile_timeout(std::chrono::duration<double> v) { profile_timeout_ = v; return *this; }
  CompileOptions& seed(uint64_t v) { seed_ = v; return *this; }
  CompileOptions& memory_limit(int64_t bytes) { memory_limit_bytes_ = bytes; return *this; }
  CompileOptions& dim_buckets(const std::string& dim, std::vector<DimBucket> buckets) {
    dim_buckets_[dim] = std::move(buckets);
    return *this;
  }
  CompileOptions& verbose(bool v = true) { verbose_ = v; return *this; }
  CompileOptions& rulesets(std::vector<std::string> v) { rulesets_ = std::move(v); return *this; }
  CompileOptions& egraph_node_limit(int64_t v) { egraph_node_limit_ = v; return *this; }
  CompileOptions& report(struct CompileReport* r) { report_ = r; return *this; }
  CompileOptions& program_cache(bool on) { program_cache_ = on; return *this; }
  CompileOptions& program_cache_dir(std::string dir) { program_cache_dir_ = std::move(dir); return *this; }
};

// Do a candidate's output and the reference program's agree, as the search and the
// compile's verification judge it? nullopt when they do, else why not. NaN must meet NaN
// and infinities match exactly. Judged at the coarser of the output's dtype and
// `computed_in` (the coarsest precision of the program that made it). F32 and wider: every
// finite element within 1e-3 of its own magnitude plus the tensor's mean magnitude (sums
// may be reassociated). BF16/F16: the same per element (5e-2 / 2e-2), or else a relative
// L2 error within 2e-2 / 5e-3 with no element off by more than a quarter of the tensor's
// largest magnitude (half-precision chains drift per element; wrong programs are wrong by
// the values' size).
struct HostTensor;
std::optional<std::string> compare_outputs(const HostTensor& got, const HostTensor& want,
                                           DType computed_in = DType::F32);

}  // namespace luminal
