// The backend-neutral runtime interface.
//
// A runtime loads a program (a Graph already lowered for it), takes typed input data,
// executes with a dim map and hands back typed outputs.
// Persist semantics: persisted inputs (weights, caches) survive executions; other
// inputs are consumed by execute; only outputs and persisted inputs stay readable.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/host_tensor.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

namespace egraph { class EGraph; }
struct CompileOptions;

// How one candidate is timed. The backend times itself (device events where it has
// them); `timeout` bounds the whole measurement, enforced inside a run as well.
struct ProfileOptions {
  int warmup = 1;
  int trials = 3;
  std::chrono::duration<double> timeout{1.0};
  // Runs enqueued back to back in each timed trial, the trial's time divided among them.
  // Where a backend enqueues asynchronously (CUDA) the device then runs them as a model's
  // steady steps do, the host's per-run work overlapped with the previous run: device
  // throughput. 1 (the search's default): one run, its host work included.
  int runs_per_trial = 1;
};

// How long one execution took, as measured by the backend (the best trial).
struct ProfileResult {
  double seconds = 0;
  bool timed_out = false;
  double warmup_seconds = 0;  // host time of the warm-up runs (one-time costs), for reports
};

// Thrown from inside a run that passed its profiling deadline.
class ProfileTimeout : public Error {
 public:
  ProfileTimeout() : Error("profiling: the run passed its deadline") {}
};

// One stage of the rule schedule: its rule sets are saturated together, under their
// own node and time budgets, before the next stage starts (so rules late in a file are
// not starved by early ones).
struct RuleStage {
  std::string name;
  std::vector<std::string> rulesets;
  int64_t node_limit = 200'000;
  double time_limit_s = 10;
};

// What a candidate is expected to cost before it runs. A candidate whose memory is
// above CompileOptions::memory_limit is rejected without running.
struct CostEstimate {
  int64_t memory_bytes = 0;  // device memory the program needs (arena + its own buffers)
};

// Profiling and verification inputs: uniform values in [-s, s), s = profiling_scale(input),
// or with one element in 8 replaced by a special value: +-0, +-inf, NaN, +-1e-40 (subnormal), +-1 and, with
// Special only, 65504 and -3e38 (past F16's range; their squares past F32's). A segment
// that computes in BF16/F16 gets SpecialHalf: a sum next to 65504 rounds there to a
// multiple of 256, so two correct programs that add in another order differ by hundreds,
// and those magnitudes would test rounding noise, not semantics.
enum class InputValues : uint8_t { Uniform, Special, SpecialHalf };

// The half-width of an input's uniform values: 2 / sqrt(its innermost extent) for a matrix or
// higher rank (as weights are initialised by fan-in), else 2. Unscaled, a 4096-wide layer's
// attention logits reached ~1e4 in verification, where softmax is an argmax and one rounding
// picks another key: two correct programs then disagree by whole rows (docs/LESSONS.md).
double profiling_scale(const Node& input, const DimMap& dims);

// The values Runtime::fill_profiling_input makes by default.
HostTensor profiling_values(const Node& input, const DimMap& dims, uint64_t seed, InputValues values);

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view name() const = 0;

  // A fresh runtime of the same kind, used to profile candidates during search.
  virtual std::unique_ptr<Runtime> fresh() const = 0;

  // ---- compiler hooks; each has a default, so a backend overrides only what it has
  // ---- (docs/BACKENDS.md states each contract) ----
  // Rule files (paths) with this backend's ops and rules, loaded after the core rules.
  virtual std::vector<std::string> rule_files() const { return {}; }
  // What, besides its name, makes a program chosen on this runtime valid to reuse (device
  // model, ISA, library versions): part of the program cache's key. Default: name().
  virtual std::string cache_identity() const { return std::string(name()); }
  // The rule schedule. Default: one stage saturating options.rulesets.
  virtual std::vector<RuleStage> rule_stages(const CompileOptions& options) const;
  // Host primitives the backend's rule guards call.
  virtual void register_primitives(egraph::EGraph&) const {}
  // How far this runtime's floating-point results may be from the reference interpreter's
  // for the same program (relative, as Rule::tolerance): 0 means bit for bit. The rule
  // verifier accepts that much besides a rule's own tolerance. The CPU backend's F32 exp2
  // and log2 are float polynomials within 2 ulp of the correctly rounded values.
  virtual double numeric_tolerance() const { return 0; }
  // Where verification runs a segment's unrewritten program, the oracle its chosen program
  // must agree with, at `dims`: null (the default) runs it on a fresh copy of this runtime.
  // A backend for which compiling that program costs more than interpreting it may return
  // a runtime that makes the same profiling inputs (the reference interpreter).
  virtual std::unique_ptr<Runtime> verification_oracle(const Graph& segment, const DimMap& dims) const {
    return nullptr;
  }
  // Extraction's cost of one node of this backend's op `name` writing `shape` (at a dim
  // bucket's representative dims), where the elements it writes misjudge it: the search's
  // first candidate in every segment is the cheapest program by these costs. nullopt (the
  // default) keeps the op's declared :cost scaled by the elements it writes.
  virtual std::optional<double> backend_op_cost(std::string_view name, std::span<const int64_t> shape) const {
    return std::nullopt;
  }
  // Cost of a program before it runs. Default: its buffers, packed by the memory planner.
  virtual CostEstimate estimate(const Graph& program, const DimMap& dims) const;
  // Called with a whole generation of candidate programs before they are loaded one by
  // one: a backend that compiles code compiles them here, in parallel. Errors here are
  // per program: a backend records them and throws from load_program.
  virtual void prepare(std::span<const Graph* const> programs) {}
  // Give input `id` (a node of the program being profiled) profiling data: values of both
  // signs from `seed`, mixed with special values as `values` says; integer inputs small
  // and non-negative (they are mostly indexes). Called once per segment. The default
  // makes the values on the host and calls set_tensor; a device backend may make them
  // where it keeps them.
  virtual void fill_profiling_input(NodeId id, const Node& input, const DimMap& dims, uint64_t seed,
                                    InputValues values);
  // Time the active program: warm-up runs, then trials; the best trial counts. The
  // default uses the host clock around run() and sets the deadline run() checks.
  virtual ProfileResult profile(const DimMap& dims, const ProfileOptions& options);
  // A worker program (and its arguments) that profiles this runtime's candidates in a
  // child process (luminal/profiling_worker.hpp), for a device that a faulting candidate
  // takes down for the rest of the process: the compile then rejects that candidate and
  // goes on with a fresh worker. Empty (the default): candidates run in this process.
  virtual std::vector<std::string> profiling_worker() const { return {}; }

  // ---- programs ----
  // Load a program into slot `slot` (replacing any program there); slot 0 is the one
  // execute() runs when there is a single plan. Input and Output nodes are addressed by
  // their `external id` (the NodeId in the user's graph), `external_ids[program node]`.
  // Data set by the user lives in the runtime, keyed by external id: loading a program
  // never drops it, and every slot shares it (persisted weights and caches are never
  // copied when execute switches between plans).
  virtual void load_program(size_t slot, const Graph& program, std::vector<NodeId> external_ids) = 0;
  void load(const Graph& program, std::vector<NodeId> external_ids);  // a single plan in slot 0

  // One plan per combination of dim buckets, all resident at once; execute() picks the
  // plan whose buckets hold the dims and runs it.
  struct Plan {
    std::map<std::string, std::pair<int64_t, int64_t>> ranges;  // dim -> inclusive range
    Graph program;
    std::vector<NodeId> external_ids;
  };
  void load_plans(std::vector<Plan> plans, uint64_t source_graph_uid = 0);
  void execute(const DimMap& dims);
  size_t active_slot() const { return active_slot_; }

  // ---- data in and out (by the user's tensor or NodeId) ----
  virtual void set_tensor(NodeId input, HostTensor data) = 0;
  // The buffer of an output or persisted input; throws luminal::Error naming the
  // tensor when it is not readable (not an output, consumed, or never set).
  virtual HostTensor get_tensor(NodeId node) const = 0;
  virtual bool has_tensor(NodeId node) const = 0;

  void set_data(const GraphTensor& t, const std::vector<float>& values);
  void set_data(const GraphTensor& t, const std::vector<double>& values);
  void set_data(const GraphTensor& t, const std::vector<int32_t>& values);
  void set_data(const GraphTensor& t, const std::vector<int64_t>& values);
  void set_data(const GraphTensor& t, HostTensor data);  // converted to the tensor's dtype
  // Braced lists: rt.set_data(a, {1.f, 2.f}) or rt.set_data(ids, {3, 4}).
  void set_data(const GraphTensor& t, std::initializer_list<float> values) {
    set_data(t, std::vector<float>(values));
  }
  void set_data(const GraphTensor& t, std::initializer_list<int> values) {
    set_data(t, std::vector<int32_t>(values.begin(), values.end()));
  }
  HostTensor get(const GraphTensor& t) const { check_graph(t); return get_tensor(t.id()); }
  std::vector<float> get_f32(const GraphTensor& t) const { return get(t).to_f32(); }
  std::vector<double> get_f64(const GraphTensor& t) const { return get(t).to_f64(); }
  std::vector<int32_t> get_i32(const GraphTensor& t) const { return get(t).to_i32(); }
  std::vector<int64_t> get_i64(const GraphTensor& t) const { return get(t).to_i64(); }
  std::vector<bool> get_bool(const GraphTensor& t) const;

  // Fill inputs from a safetensors file by matching Input labels to tensor names.
  // Returns the labels that were loaded. Missing tensors are an error unless
  // `allow_missing`; a shape or dtype mismatch is always an error (dtypes convert).
  std::vector<std::string> load_safetensors(const Graph& graph, const std::string& path,
                                            bool allow_missing = true);

 protected:
  // Run the program in `slot` (it is loaded).
  virtual void run(size_t slot, const DimMap& dims) = 0;
  // During profile(): a backend whose ops are long checks this between them and throws
  // ProfileTimeout, so one slow candidate cannot stall the search.
  void check_deadline() const {
    if (deadline_ && std::chrono::steady_clock::now() > *deadline_) throw ProfileTimeout();
  }
  void set_deadline(std::optional<std::chrono::steady_clock::time_point> d) { deadline_ = d; }
  void check_graph(const GraphTensor& t) const;

 private:
  std::vector<std::map<std::string, std::pair<int64_t, int64_t>>> plan_ranges_;
  size_t active_slot_ = 0;
  uint64_t source_uid_ = 0;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

}  // namespace luminal
