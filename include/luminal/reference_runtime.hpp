// ReferenceRuntime: the slow-but-certain interpreter every backend is tested against.
// Computes in double (floats) or int64 (integers) and rounds every result to its dtype,
// so F32/F16/BF16 results match IEEE arithmetic in that type for + - * / sqrt.
// Data lives by external id and is shared by every loaded slot (plan).
#pragma once

#include <memory>
#include <unordered_map>

#include "luminal/runtime.hpp"

namespace luminal {

class ReferenceRuntime : public Runtime {
 public:
  ReferenceRuntime();
  ~ReferenceRuntime() override;
  ReferenceRuntime(ReferenceRuntime&&) noexcept;
  ReferenceRuntime& operator=(ReferenceRuntime&&) noexcept;

  std::string_view name() const override { return "reference"; }
  std::unique_ptr<Runtime> fresh() const override { return std::make_unique<ReferenceRuntime>(); }
  // src/core/reference.egg: the fused sum-of-products (RefSumMul) the search may choose
  // for every matmul-shaped Mul -> SumReduce, instead of materialising the product.
  std::vector<std::string> rule_files() const override;
  std::vector<RuleStage> rule_stages(const CompileOptions& options) const override;
  void load_program(size_t slot, const Graph& program, std::vector<NodeId> external_ids) override;
  void set_tensor(NodeId input, HostTensor data) override;
  HostTensor get_tensor(NodeId node) const override;
  bool has_tensor(NodeId node) const override;

  struct State;

 protected:
  void run(size_t slot, const DimMap& dims) override;
  // A backend op that a subclass's rule files declare: computed from its inputs, each
  // read through its view into a contiguous tensor. The base knows only its own ops.
  virtual HostTensor run_backend_op(const Node& op, std::span<const HostTensor> inputs,
                                    const std::vector<int64_t>& out_shape, const DimMap& dims) const;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace luminal
