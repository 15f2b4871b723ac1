// The CUDA backend on the backend contract (include/luminal/runtime.hpp): every program
// node runs on the device. Fused regions and the primitives the search left unfused are
// kernels emitted by the shared kernel IR (emit_cuda) and compiled by NVRTC for the
// device's arch (a generation's kernels in parallel, cached in memory and on disk);
// matmuls are backend ops with two competing implementations, cuBLASLt and our
// GEMV/skinny-GEMM kernel, that the search measures. Intermediates live in one device
// arena per runtime, placed by the memory planner; inputs, weights and KV caches live on
// the device by external id across runs and plans. Runs replay CUDA graphs: a new
// (dims, pointers) resolution updates the plan's graph in place. docs/CUDA_BACKEND.md.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "luminal/runtime.hpp"
#include "luminal_cuda/compiler.hpp"
#include "luminal_cuda/device.hpp"

namespace luminal::cuda {

// The backend's rules and host primitives, usable without a GPU (the rule tests and the
// NVRTC test use them; CudaRuntime's hooks return the same).
std::vector<std::string> runtime_rule_files();
std::vector<RuleStage> runtime_rule_stages(const Runtime& base, const CompileOptions& options);
void register_runtime_primitives(egraph::EGraph& eg);
std::optional<double> runtime_backend_op_cost(std::string_view name, std::span<const int64_t> shape);
// The CUDA C translation unit of one region (kernel::serialize text), its entry point
// named `name`. Throws luminal::Error when the region cannot be lowered.
KernelSource region_kernel_source(const std::string& region, const std::string& name);
// The regions (as text) a program's nodes run as kernels, including the operand copies
// its matmuls always need; what `prepare` compiles.
std::vector<std::string> program_regions(const luminal::Graph& program);

class CudaRuntime : public Runtime {
 public:
  struct Shared;  // context, stream, compiled kernels, cuBLASLt: shared with fresh() copies
  // Throws luminal::Error("CUDA backend unavailable: ...") where no GPU can be used.
  explicit CudaRuntime(int device = 0);
  explicit CudaRuntime(std::shared_ptr<Shared> shared);
  ~CudaRuntime() override;
  CudaRuntime(CudaRuntime&&) noexcept;
  CudaRuntime& operator=(CudaRuntime&&) noexcept;

  std::string_view name() const override { return "cuda"; }
  // F32 exp2/log2 are float polynomials and sin is CUDA's sinf, each within 2 ulp (not the
  // reference's double rounded once); a few ulp more through the ops of a fused region.
  double numeric_tolerance() const override { return 1e-6; }
  std::unique_ptr<Runtime> fresh() const override;
  std::vector<std::string> rule_files() const override { return runtime_rule_files(); }
  std::vector<RuleStage> rule_stages(const CompileOptions& options) const override {
    return runtime_rule_stages(*this, options);
  }
  void register_primitives(egraph::EGraph& eg) const override { register_runtime_primitives(eg); }
  // CudaAttention seeds a prefill's search only where it runs on tensor cores (attention_cost).
  std::optional<double> backend_op_cost(std::string_view name, std::span<const int64_t> shape) const override {
    return runtime_backend_op_cost(name, shape);
  }
  void prepare(std::span<const luminal::Graph* const> programs) override;
  // F32/F16/BF16 profiling data is made on the device (a model's weights would take
  // minutes to make on the host); adversarial and integer data as the default does.
  void fill_profiling_input(NodeId id, const Node& input, const DimMap& dims, uint64_t seed, InputValues values) override;
  ProfileResult profile(const DimMap& dims, const ProfileOptions& options) override;
  // Candidates are profiled in `luminal-cuda-profile-worker` (built beside this library),
  // so that one that faults the GPU is rejected instead of ending the compile; the
  // environment's LUMINAL_CUDA_PROFILE_WORKER names another program, or 0 for none (then
  // a fault stops the compile with DeviceLost).
  std::vector<std::string> profiling_worker() const override;
  void load_program(size_t slot, const luminal::Graph& program, std::vector<NodeId> external_ids) override;
  void set_tensor(NodeId input, HostTensor data) override;
  HostTensor get_tensor(NodeId node) const override;
  bool has_tensor(NodeId node) const override;

  // Zero copy: input or output `node` lives at `ptr` (device memory the caller owns, at
  // least `bytes`). Kernels read (input) or write (output) it directly.
  void bind_device_pointer(NodeId node, DevicePtr ptr, size_t bytes);
  // Where the data of an input or output lives on the device (0 when it has none).
  DevicePtr device_pointer(NodeId node) const;

  // CUDA graphs: on by default; LUMINAL_CUDA_GRAPHS=0 turns them off (every kernel is
  // then launched one by one, easier to debug).
  void set_graphs_enabled(bool enabled);
  bool graphs_enabled() const;
  // New dims or pointers (a decode step at a new position) update the plan's executable
  // graph in place (cuGraphExecUpdate) instead of running eagerly: on by default;
  // LUMINAL_CUDA_GRAPH_UPDATE=0 turns it off (then a resolution is captured on its second run).
  void set_graph_updates_enabled(bool enabled);
  bool graph_updates_enabled() const;

  // Counters for tests and logs.
  int64_t last_arena_bytes() const;
  int graphs_captured() const;    // executable CUDA graphs instantiated by this runtime
  int graphs_updated() const;     // executable graphs updated in place to a new resolution's launches
  int graph_replays() const;      // runs that replayed a graph as it was
  int eager_runs() const;         // runs that launched their ops one by one (graphs off or not yet worth it)
  int resolutions() const;        // runs whose launches were built anew (new dims or pointers)
  int resolutions_reused() const; // runs of new dims whose launches were the last run's (only the dims buffer changed)
  int gemvs_grouped() const;      // GEMV steps that joined the launch of the one before (same x), over resolutions
  int kernels_compiled() const;   // NVRTC compilations by this runtime and its copies (cache misses)
  int steps_running(std::string_view backend_op) const;  // steps of the loaded programs that are this backend op
  const DeviceInfo& device_info() const;

  struct State;

 protected:
  void run(size_t slot, const DimMap& dims) override;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace luminal::cuda
