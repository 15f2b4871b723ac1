// A test backend on the shared kernel IR: the reference interpreter, plus the fusion
// rules generated from ops.def, whose Fused regions run as C++ kernels emitted by the
// kernel IR and compiled by the host compiler. prepare() compiles a generation's new
// kernels in parallel, several per translation unit.
#pragma once

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "luminal/kernel/fusion.hpp"
#include "luminal/kernel/host_compiler.hpp"
#include "luminal/luminal.hpp"

namespace luminal::testing {

class KernelTestRuntime : public ReferenceRuntime {
 public:
  struct Compiled {
    kernel::Kernel kernel;
    std::shared_ptr<const kernel::SharedLibrary> library;
    void (*entry)(void* const*, const int64_t*, int64_t, int64_t) = nullptr;
  };
  struct Cache {
    std::mutex mutex;
    kernel::HostCompiler compiler;
    std::unordered_map<std::string, std::shared_ptr<Compiled>> by_region;
  };

  explicit KernelTestRuntime(std::shared_ptr<Cache> cache = std::make_shared<Cache>()) : cache_(std::move(cache)) {}
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

  // Compile every region of `programs` that has no kernel yet: 16 kernels per unit,
  // units in parallel.
  void prepare(std::span<const Graph* const> programs) override {
    std::vector<std::string> regions;
    {
      std::lock_guard lock(cache_->mutex);
      for (const Graph* p : programs)
        for (const Node& n : p->nodes())
          if (n.op == OpKind::BackendOp && n.backend->name == "Fused" && !cache_->by_region.count(n.backend->str(0)) &&
              std::find(regions.begin(), regions.end(), n.backend->str(0)) == regions.end())
            regions.push_back(n.backend->str(0));
    }
    compile_regions(regions);
  }
  int kernels_compiled() const { return cache_->compiler.compiler_invocations(); }

 protected:
  HostTensor run_backend_op(const Node& n, std::span<const HostTensor> in, const std::vector<int64_t>& shape,
                            const DimMap& dims) const override {
    if (n.backend->name != "Fused") return ReferenceRuntime::run_backend_op(n, in, shape, dims);
    std::shared_ptr<Compiled> c;
    {
      std::lock_guard lock(cache_->mutex);
      auto it = cache_->by_region.find(n.backend->str(0));
      if (it != cache_->by_region.end()) c = it->second;
    }
    if (!c) {  // loaded without prepare(): compile it now
      const_cast<KernelTestRuntime*>(this)->compile_regions({n.backend->str(0)});
      std::lock_guard lock(cache_->mutex);
      c = cache_->by_region.at(n.backend->str(0));
    }
    int64_t numel = 1;
    for (auto s : shape) numel *= s;
    HostTensor out = HostTensor::zeros(n.dtype, static_cast<size_t>(numel));
    int32_t error = 0;
    std::vector<void*> buffers;
    for (const auto& t : in) buffers.push_back(const_cast<std::byte*>(t.bytes.data()));
    buffers.push_back(out.bytes.data());
    buffers.push_back(&error);
    std::vector<int64_t> dim_values;
    for (const auto& d : c->kernel.dim_names) dim_values.push_back(dims.at(d));
    int64_t extent = c->kernel.extent.eval(dims);
    c->entry(buffers.data(), dim_values.data(), 0, extent);
    LUMINAL_CHECK(error == 0, "Fused kernel reported error ", error);
    return out;
  }

 private:
  static std::string entry_name(const std::string& region) {
    std::string name = "k";  // (not "k" + ...: GCC 12 warns falsely on that concatenation)
    name += std::to_string(std::hash<std::string>{}(region));
    return name;
  }
  void compile_regions(const std::vector<std::string>& regions) {
    constexpr size_t kPerUnit = 16;
    std::vector<std::string> sources;
    std::vector<std::shared_ptr<Compiled>> compiled;
    for (size_t i = 0; i < regions.size(); ++i) {
      if (i % kPerUnit == 0) sources.emplace_back();
      auto c = std::make_shared<Compiled>();
      auto k = kernel::lower(kernel::parse_region(regions[i]));
      LUMINAL_ASSERT(k.has_value(), "a Fused region the rules built must lower");
      c->kernel = std::move(*k);
      sources.back() += kernel::emit_cpp(c->kernel, entry_name(regions[i]));
      compiled.push_back(std::move(c));
    }
    auto libs = cache_->compiler.compile_batch(sources);
    std::lock_guard lock(cache_->mutex);
    for (size_t i = 0; i < regions.size(); ++i) {
      compiled[i]->library = libs[i / kPerUnit];
      compiled[i]->entry =
          compiled[i]->library->function<void(void* const*, const int64_t*, int64_t, int64_t)>(entry_name(regions[i]));
      cache_->by_region[regions[i]] = compiled[i];
    }
  }
  std::shared_ptr<Cache> cache_;
};

}  // namespace luminal::testing
