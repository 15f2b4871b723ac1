#include "luminal/kernel/kernel_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>

#include "luminal/error.hpp"

namespace luminal::kernel {
namespace {
std::string entry_name(const std::string& region) {
  std::string name = "lk";  // (not "lk" + ...: GCC 12 warns falsely on that concatenation)
  name += std::to_string(std::hash<std::string>{}(region));
  return name;
}
}  // namespace

void CppKernelCache::compile(const std::vector<std::string>& wanted) {
  std::vector<std::string> regions;
  {
    std::lock_guard lock(mutex_);
    for (const auto& r : wanted)
      if (!kernels_.count(r) && std::find(regions.begin(), regions.end(), r) == regions.end()) regions.push_back(r);
  }
  if (regions.empty()) return;
  constexpr size_t kPerUnit = 16;
  std::vector<std::string> sources;
  std::vector<std::shared_ptr<Compiled>> compiled;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (i % kPerUnit == 0) sources.emplace_back();
    auto c = std::make_shared<Compiled>();
    auto k = lower(parse_region(regions[i]));
    LUMINAL_CHECK(k.has_value(), "kernel cache: a region cannot be lowered to a kernel");
    c->kernel = std::move(*k);
    // LUMINAL_KERNEL_DUMP=DIR: each compiled region's text, IR and source, for diagnosis.
    if (const char* dir = std::getenv("LUMINAL_KERNEL_DUMP")) {
      const std::string base = std::string(dir) + "/" + entry_name(regions[i]);
      std::ofstream(base + ".region") << regions[i] << "\n";
      std::ofstream(base + ".ir") << to_string(c->kernel);
      std::ofstream(base + ".cpp") << emit_cpp(c->kernel, entry_name(regions[i]));
    }
    sources.back() += emit_cpp(c->kernel, entry_name(regions[i]));
    compiled.push_back(std::move(c));
  }
  auto libs = compiler_.compile_batch(sources);
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < regions.size(); ++i) {
    compiled[i]->library = libs[i / kPerUnit];
    compiled[i]->entry = compiled[i]->library->function<void(void* const*, const int64_t*, int64_t, int64_t)>(
        entry_name(regions[i]));
    kernels_.emplace(regions[i], compiled[i]);
  }
}

std::shared_ptr<const CppKernelCache::Compiled> CppKernelCache::get(const std::string& region) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = kernels_.find(region); it != kernels_.end()) return it->second;
  }
  compile({region});
  std::lock_guard lock(mutex_);
  return kernels_.at(region);
}

}  // namespace luminal::kernel
