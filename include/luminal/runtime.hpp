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
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "luminal/graph.hpp"
#include "luminal/host_tensor.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

// How long one execution took, as measured by the backend.
struct ProfileResult {
  double seconds = 0;
  bool timed_out = false;
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view name() const = 0;

  // A fresh runtime of the same kind, used to profile candidates during search.
  virtual std::unique_ptr<Runtime> fresh() const = 0;
  // Rule files (paths) with this backend's lowering rules, loaded after the core rules.
  virtual std::vector<std::string> rule_files() const { return {}; }

  // Load a program. Input and Output nodes are addressed by their `external id`
  // (the NodeId in the user's graph), given by `external_ids[program node]`.
  virtual void load(const Graph& program, std::vector<NodeId> external_ids) = 0;

  // One plan per combination of dim buckets; execute() picks the plan whose buckets
  // hold the dims (persisted tensors carry over) and runs it.
  struct Plan {
    std::map<std::string, std::pair<int64_t, int64_t>> ranges;  // dim -> inclusive range
    Graph program;
    std::vector<NodeId> external_ids;
  };
  void load_plans(std::vector<Plan> plans, uint64_t source_graph_uid = 0);
  void execute(const DimMap& dims);
  // Time `trials` executions; stop early once `timeout` is exceeded.
  ProfileResult profile(const DimMap& dims, int trials, std::chrono::duration<double> timeout);

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
  virtual void run(const DimMap& dims) = 0;
  void check_graph(const GraphTensor& t) const;

 private:
  std::vector<Plan> plans_;
  int active_plan_ = -1;
  uint64_t source_uid_ = 0;
};

}  // namespace luminal
