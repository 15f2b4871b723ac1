// A test backend on the shared kernel IR: the reference interpreter, plus the fusion
// rules generated from ops.def, whose Fused regions run as C++ kernels emitted by the
// kernel IR and compiled by the host compiler. prepare() compiles a generation's new
// kernels at once (kernel::CppKernelCache).
#pragma once

#include <cstring>

#include "luminal/kernel/fusion.hpp"
#include "luminal/kernel/kernel_cache.hpp"
#include "luminal/luminal.hpp"

namespace luminal::testing {

class KernelTestRuntime : public ReferenceRuntime {
 public:
  explicit KernelTestRuntime(std::shared_ptr<kernel::CppKernelCache> cache = std::make_shared<kernel::CppKernelCache>())
      : cache_(std::move(cache)) {}
  std::unique_ptr<Runtime> fresh() const override { return std::make_unique<KernelTestRuntime>(cache_); }
  std::vector<std::string> rule_files() const override {
    auto files = ReferenceRuntime::rule_files();
    files.push_back(kernel::fusion_rule_file());
    return files;
  }
  void register_primitives(egraph::EGraph& eg) const override { kernel::register_fusion_primitives(eg); }
  std::vector<RuleStage> rule_stages(const CompileOptions& o) const override {
    auto stages = ReferenceRuntime::rule_stages(o);
    stages.push_back({"fuse", {"fuse"}, 30'000, 10});
    return stages;
  }
  void prepare(std::span<const Graph* const> programs) override {
    std::vector<std::string> regions;
    for (const Graph* p : programs)
      for (const Node& n : p->nodes())
        if (n.op == OpKind::BackendOp && n.backend->name == "Fused") regions.push_back(n.backend->str(0));
    cache_->compile(regions);
  }
  int kernels_compiled() const { return cache_->compiler_invocations(); }

 protected:
  HostTensor run_backend_op(const Node& n, std::span<const HostTensor> in, const std::vector<int64_t>& shape,
                            const DimMap& dims) const override {
    if (n.backend->name != "Fused") return ReferenceRuntime::run_backend_op(n, in, shape, dims);
    auto c = cache_->get(n.backend->str(0));
    int64_t numel = 1;
    for (auto s : shape) numel *= s;
    HostTensor out = HostTensor::zeros(n.dtype, static_cast<size_t>(numel));
    int32_t error[kernel::kErrorWords] = {};
    std::vector<void*> buffers;
    for (const auto& t : in) buffers.push_back(const_cast<std::byte*>(t.bytes.data()));
    buffers.push_back(out.bytes.data());
    buffers.push_back(error);
    std::vector<int64_t> dim_values;
    for (const auto& d : c->kernel.dim_names) dim_values.push_back(dims.at(d));
    c->entry(buffers.data(), dim_values.data(), 0, c->kernel.extent.eval(dims));
    LUMINAL_CHECK(error[0] == 0, kernel::describe_error(c->kernel, error, dims, n.user_op));
    return out;
  }

 private:
  std::shared_ptr<kernel::CppKernelCache> cache_;
};

}  // namespace luminal::testing
