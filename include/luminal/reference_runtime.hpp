// ReferenceRuntime: the slow-but-certain interpreter every backend is tested against.
// Computes in double (floats) or int64 (integers) and rounds every result to its dtype,
// so F32/F16/BF16 results match IEEE arithmetic in that type for + - * / sqrt.
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
  void load(const Graph& program, std::vector<NodeId> external_ids) override;
  void set_tensor(NodeId input, HostTensor data) override;
  HostTensor get_tensor(NodeId node) const override;
  bool has_tensor(NodeId node) const override;

 protected:
  void run(const DimMap& dims) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace luminal
