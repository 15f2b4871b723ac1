// The CPU backend: every program node runs natively. Fused regions and the primitives
// the search left unfused are kernels emitted through the shared kernel IR and compiled
// by the system compiler (cached in memory and on disk); matmuls run on our blocked SIMD
// GEMM or OpenBLAS, whichever the search measured faster; every kernel is parallel on
// one thread pool. Intermediates live in one arena per program, placed by the memory
// planner for the dims of each run. Data keeps its dtype: F16/BF16 weights are
// converted inside the kernels. docs/CPU_BACKEND.md.
#pragma once

#include <memory>

#include "luminal/runtime.hpp"

namespace luminal::cpu {

class CpuRuntime : public Runtime {
 public:
  struct Shared;  // compiled kernels, shared by a runtime and its fresh() copies
  CpuRuntime();
  explicit CpuRuntime(std::shared_ptr<Shared> shared);
  ~CpuRuntime() override;
  CpuRuntime(CpuRuntime&&) noexcept;
  CpuRuntime& operator=(CpuRuntime&&) noexcept;

  std::string_view name() const override { return "cpu"; }
  std::unique_ptr<Runtime> fresh() const override;
  std::vector<std::string> rule_files() const override;
  std::vector<RuleStage> rule_stages(const CompileOptions& options) const override;
  void register_primitives(egraph::EGraph& eg) const override;
  // F32 exp2/log2 are float polynomials within 2 ulp (not the reference's double rounded
  // once); a few ulp more through the ops of a fused region.
  double numeric_tolerance() const override { return 1e-6; }
  // The reference interpreter, for segments small enough at the verification dims that
  // interpreting the unrewritten program is cheaper than compiling its kernels.
  std::unique_ptr<Runtime> verification_oracle(const Graph& segment, const DimMap& dims) const override;
  void prepare(std::span<const Graph* const> programs) override;
  void load_program(size_t slot, const Graph& program, std::vector<NodeId> external_ids) override;
  void set_tensor(NodeId input, HostTensor data) override;
  HostTensor get_tensor(NodeId node) const override;
  bool has_tensor(NodeId node) const override;

  // Peak bytes of the last run's arena (intermediates and outputs).
  int64_t last_arena_bytes() const;
  // Bytes of persisted weights packed for our GEMM (kept across executes, dropped when a
  // weight gets new data).
  int64_t packed_weight_bytes() const;
  // GEMM steps that ran with the sibling before them (one A packed once: gemm_group), in all runs.
  int64_t gemms_grouped() const;
  // Kernels compiled by this runtime and its copies (cache misses included).
  int kernels_compiled() const;

  struct State;

 protected:
  void run(size_t slot, const DimMap& dims) override;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace luminal::cpu
